#!/usr/bin/env bash
# Resident tensors measured (docs/BENCHMARKS.md, "Resident tensors"), each against its
# baseline in the same run:
#   skinny   16x8192^2 NVFP4 weight-only, B inline (37.7 MB a call) against B resident,
#            one caller and four; the kernel's error with the resident weight (--verify);
#   stack    64 callers with M = 1 against one resident NVFP4 8192^2 weight: rows per
#            launch, the server's compute per request, against the same server with
#            --max_batch_size=1 and against a tiny Matmul of the same request and response
#            size (A [1,1] FP16, B [1,8192] FP16 inline: ~16 KiB in, 32 KiB out); and
#            the same rows on 8 MatmulStreams (stack_stream_512), against the tiny
#            Matmul on the same streams, on gemm-server and on grpc-floor; and the 64
#            callers again with the weight re-laid out for the swap-AB kernels
#            (--quantized_layout=swap-ab, stack_swapab_64), which --verify checks;
#   big      a 3 GiB FP32 operand [32768, 24576] put, then B of a Matmul with M = 4
#            (C checked against FP64 by --verify; the whole of C is its 4 sampled rows);
#   upload   a 2 GiB tensor put over 1, 4 and 8 connections against loopback TCP with
#            four streams (iperf3, one process per stream) on the same host.
# Then a table (bench/resident_summary.py).
#
# Usage: bench/resident_bench.sh BIN_DIR [cuda|cpu] [CASES]
#   BIN_DIR: a build tree or a flat folder with gemm-server and gemm-cli (and iperf3 when
#   it is not on PATH); CASES: any of "skinny stack big upload" (default: all).
# Env: DURATION_S (5), WARMUP_S (1), OUT_DIR (/tmp/resident_bench), DATA_DIR (OUT_DIR).
set -uo pipefail
ulimit -n 65536 2>/dev/null || true
bin=${1:?usage: resident_bench.sh BIN_DIR [cuda|cpu] [CASES]}
mode=${2:-cuda}
cases=${3:-skinny stack big upload}
here=$(cd "$(dirname "$0")" && pwd)
duration=${DURATION_S:-5}
warmup=${WARMUP_S:-1}
out=${OUT_DIR:-/tmp/resident_bench}
data=${DATA_DIR:-$out}
mkdir -p "$out" "$data"
rm -f "$out"/*.json "$out"/*.log "$out"/*.err "$out"/*.txt
port=50791
target=127.0.0.1:$port
source "$here/server_control.sh"
server_bin=$(bench_exe gemm-server) && cli=$(bench_exe gemm-cli) || exit 1
floor_bin=$(bench_exe grpc-floor 2>/dev/null || true)
iperf=$(command -v iperf3 || echo "$bin/iperf3")
py=
for candidate in python3 /usr/bin/python3; do  # one with numpy (it writes the .npy files)
  "$candidate" -c "import numpy" 2>/dev/null && { py=$candidate; break; }
done
[ -n "$py" ] || { echo "no python3 with numpy here"; exit 1; }

echo "## $(date -u +%Y-%m-%dT%H:%MZ) $mode, $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
[ "$mode" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1

start() {  # NAME ARGS...: gemm-server on $port with ARGS (or grpc-floor for NAME floor)
  local name=$1
  shift
  if [ "$name" = floor ]; then
    bench_start "$name" "$floor_bin" --port "$port"
  else
    bench_start "$name" "$server_bin" --port "$port" --metrics_port -1 --backend "$mode" "$@"
  fi
}
stop() { bench_stop; }
trap stop EXIT
bench() {  # CASE ARGS...: one gemm-cli bench run, kept as CASE.json
  local name=$1
  shift
  "$cli" bench --target "$target" --duration_s "$duration" --warmup_s "$warmup" \
    --server_pid "$pid" --json "$@" >"$out/$name.json" 2>"$out/$name.err" ||
    { echo "$name failed:"; tail -3 "$out/$name.err"; }
}
npy() {  # FILE ROWS COLS: a random float32 .npy, written in slabs
  "$py" - "$1" "$2" "$3" <<'EOF'
import sys
import numpy as np
path, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, cols))
rng = np.random.default_rng(7)
step = max(1, (256 << 20) // (4 * cols))
for i in range(0, rows, step):
    a[i:i + step] = rng.standard_normal((min(step, rows - i), cols), dtype=np.float32)
a.flush()
EOF
}

if [[ " $cases " == *" skinny "* ]]; then
  start skinny_server || exit 1
  q=(--quantized --format nvfp4 --weight_only --m 16 --n 8192 --k 8192 --dtype float16)
  bench skinny_inline_c1 "${q[@]}" --concurrency 1
  bench skinny_resident_c1 "${q[@]}" --resident_b --concurrency 1
  bench skinny_inline_c4 "${q[@]}" --concurrency 4 --channels 4
  bench skinny_resident_c4 "${q[@]}" --resident_b --concurrency 4 --channels 4
  bench skinny_resident_c4_async "${q[@]}" --resident_b --concurrency 4 --channels 4 --async
  # The same request and response sizes (256 KiB of A in, 512 KiB of C out) with nothing
  # to compute: what carrying them costs, here and on gRPC alone (grpc-floor).
  same=(--m 16 --n 8192 --k 16 --dtype float16 --concurrency 4 --channels 4)
  bench skinny_same_size_c4 "${same[@]}"
  bench skinny_same_size_c4_async "${same[@]}" --async
  npy "$data/w8192.npy" 8192 8192
  h=$("$cli" put "$data/w8192.npy" --target "$target" --format nvfp4 --label w8192 2>"$out/skinny_put.txt")
  "$cli" quantized --target "$target" --b "@$h" --m 16 --dtype float16 --weight_only --verify \
    >"$out/skinny_verify.txt" 2>&1
  "$cli" rm "$h" --target "$target"
  rm -f "$data/w8192.npy"
  stop
  if [ -n "$floor_bin" ]; then
    start floor || exit 1
    bench skinny_floor_c4 "${same[@]}"
    bench skinny_floor_c4_async "${same[@]}" --async
    stop
  fi
fi

if [[ " $cases " == *" stack "* ]]; then
  s=(--quantized --format nvfp4 --weight_only --m 1 --n 8192 --k 8192 --dtype float16
     --resident_b --concurrency 64 --channels 8 --async)
  start stack_server || exit 1
  bench stack_resident_64 "${s[@]}"
  bench stack_tiny_64 --m 1 --k 1 --n 8192 --dtype float16 --concurrency 64 --channels 8 --async
  # The same rows on 8 MatmulStreams, 64 in flight on each; and the tiny Matmul of the
  # same sizes on the same streams, here and on grpc-floor (what gRPC itself carries).
  streamed=(--stream --concurrency 8 --channels 8 --outstanding 64)
  bench stack_stream_512 --quantized --format nvfp4 --weight_only --m 1 --n 8192 --k 8192 \
    --dtype float16 --resident_b "${streamed[@]}" --verify
  bench stack_tiny_stream_512 --m 1 --k 1 --n 8192 --dtype float16 "${streamed[@]}"
  stop
  start stack_server_unbatched --max_batch_size=1 || exit 1
  bench stack_unbatched_64 "${s[@]}"
  stop
  start stack_server_swapab --quantized_layout=swap-ab || exit 1
  bench stack_swapab_64 "${s[@]}"
  bench stack_swapab_verify --quantized --format nvfp4 --weight_only --m 1 --n 8192 --k 8192 \
    --dtype float16 --resident_b --concurrency 8 --channels 8 --async --verify
  stop
  if [ -n "$floor_bin" ]; then
    start floor || exit 1
    bench stack_tiny_stream_512_floor --m 1 --k 1 --n 8192 --dtype float16 "${streamed[@]}"
    stop
  fi
fi

if [[ " $cases " == *" big "* ]]; then
  npy "$data/big_b.npy" 32768 24576
  start big_server || exit 1
  h=$("$cli" put "$data/big_b.npy" --target "$target" --label big_b 2>"$out/big_put.txt")
  "$cli" matmul --target "$target" --b "@$h" --m 4 --verify >"$out/big_verify.txt" 2>&1
  "$cli" ls --target "$target" >>"$out/big_verify.txt" 2>&1
  "$cli" rm "$h" --target "$target"
  stop
  rm -f "$data/big_b.npy"
fi

if [[ " $cases " == *" upload "* ]]; then
  for s in 1 2 3 4; do "$iperf" -s -1 -p $((5398 + s)) >/dev/null 2>&1 & done
  sleep 0.5
  for s in 1 2 3 4; do
    "$iperf" -c 127.0.0.1 -p $((5398 + s)) -t "$duration" -J >"$out/iperf_4_$s.json" &
  done
  wait
  npy "$data/up.npy" 16384 32768  # 2 GiB
  start upload_server || exit 1
  for c in 1 4 8; do
    for rep in 1 2; do
      h=$("$cli" put "$data/up.npy" --target "$target" --connections "$c" 2>>"$out/upload_c$c.txt")
      "$cli" rm "$h" --target "$target"
    done
  done
  stop
  rm -f "$data/up.npy"
fi

"$py" "$here/resident_summary.py" "$out"
