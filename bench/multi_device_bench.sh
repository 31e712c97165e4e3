#!/usr/bin/env bash
# Several devices in one server (docs/BENCHMARKS.md, "Several GPUs"), each case against
# its baseline in the same run:
#   spread    batched 128^3 and 256^3 FP16_TENSOR requests (gemm-cli bench, 128 and 64
#             callers) on one device and on all of them: req/s, the mean batch, and each
#             device's gemm_device_busy_seconds_total over the run;
#   resident  a [1024, 1024] weight put on the first device and another on the second
#             (gemm-cli put --device): 64 callers with M = 64 against the second one
#             (shared-weight batching on a device other than the first, the other idle),
#             then 32 callers against each at once; and a matmul whose A is on one device
#             and B on the other, which the server refuses (no copy between devices).
# Then a table (bench/multi_device_summary.py).
#
# Usage: bench/multi_device_bench.sh BIN_DIR [cuda|cpu]
#   BIN_DIR: a build tree or a flat folder with gemm-server and gemm-cli. cuda needs two
#   GPUs or more (it says so and exits 2 otherwise); cpu runs the same cases on a server
#   with --cpu_devices=2 (float32 requests), to try the script without GPUs.
# Env: DURATION_S (5), WARMUP_S (1), OUT_DIR (/tmp/multi_device_bench).
set -uo pipefail
ulimit -n 65536 2>/dev/null || true
bin=${1:?usage: multi_device_bench.sh BIN_DIR [cuda|cpu]}
mode=${2:-cuda}
here=$(cd "$(dirname "$0")" && pwd)
duration=${DURATION_S:-5}
warmup=${WARMUP_S:-1}
out=${OUT_DIR:-/tmp/multi_device_bench}
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log "$out"/*.err "$out"/*.txt
port=50793
mport=9493
target=127.0.0.1:$port
source "$here/server_control.sh"
server_bin=$(bench_exe gemm-server) && cli=$(bench_exe gemm-cli) || exit 1
py=
for candidate in python3 /usr/bin/python3; do  # one with numpy (it writes the .npy files)
  "$candidate" -c "import numpy" 2>/dev/null && { py=$candidate; break; }
done
[ -n "$py" ] || { echo "no python3 with numpy here"; exit 1; }

case $mode in
  cuda)
    devices=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "$devices" -lt 2 ]; then
      echo "multi_device_bench: needs two GPUs; this machine has $devices: nothing measured"
      exit 2
    fi
    one=(--backend cuda --devices 0) all=(--backend cuda --devices all)
    work=(--dtype float16 --precision fp16_tensor)
    dtype=float16
    ;;
  cpu)
    devices=2
    one=(--backend cpu --cpu_devices 1) all=(--backend cpu --cpu_devices 2)
    work=(--dtype float32)
    dtype=float32
    ;;
  *) echo "mode $mode is not cuda or cpu"; exit 1 ;;
esac

echo "## $(date -u +%Y-%m-%dT%H:%MZ) $mode, $devices devices, $(nproc) cores"
[ "$mode" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

start() {  # NAME ARGS...: gemm-server on $port with ARGS, waiting until it answers
  local name=$1
  shift
  bench_start "$name" "$server_bin" --host 127.0.0.1 --port "$port" --metrics_host 127.0.0.1 \
    --metrics_port "$mport" "$@"
}
stop() { bench_stop; }
trap stop EXIT
busy() {  # each device's gemm_device_busy_seconds_total, "device seconds" per line
  "$py" - "$mport" <<'EOF'
import re
import sys
import urllib.request
page = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
for m in re.finditer(r'^gemm_device_busy_seconds_total\{device="(\d+)"\} (\S+)$', page, re.M):
    print(m.group(1), m.group(2))
EOF
}
bench() {  # CASE ARGS...: one gemm-cli bench run, kept as CASE.json
  local name=$1
  shift
  "$cli" bench --target "$target" --duration_s "$duration" --warmup_s "$warmup" \
    --json "$@" >"$out/$name.json" 2>"$out/$name.err" ||
    { echo "$name failed:"; tail -3 "$out/$name.err"; }
}
measured() {  # CASE ARGS...: bench, with each device's busy seconds before and after
  local name=$1
  busy >"$out/$name.busy_before.txt"
  bench "$@"
  busy >"$out/$name.busy_after.txt"
}
npy() {  # FILE ROWS COLS: a random .npy of the requests' dtype
  "$py" -c "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(7)
.standard_normal((int(sys.argv[2]), int(sys.argv[3]))).astype(sys.argv[4]))" "$1" "$2" "$3" "$dtype"
}

# spread: one device, then all of them, each its own server.
for config in one all; do
  if [ "$config" = one ]; then start "spread_$config" "${one[@]}" || exit 1
  else start "spread_$config" "${all[@]}" || exit 1; fi
  measured "spread_${config}_128" --m 128 --n 128 --k 128 "${work[@]}" --concurrency 128 \
    --channels 8
  measured "spread_${config}_256" --m 256 --n 256 --k 256 "${work[@]}" --concurrency 64 \
    --channels 8
  stop
done

# resident: weights on the first and the second device.
start resident "${all[@]}" || exit 1
npy "$out/w.npy" 1024 1024
npy "$out/a.npy" 64 1024
w0=$("$cli" put "$out/w.npy" --target "$target" --device "$mode:0" --label w0 2>>"$out/put.err")
w1=$("$cli" put "$out/w.npy" --target "$target" --device "$mode:1" --label w1 2>>"$out/put.err")
a0=$("$cli" put "$out/a.npy" --target "$target" --device "$mode:0" --label a0 2>>"$out/put.err")
"$cli" ls --target "$target" >"$out/resident_ls.txt" 2>&1
one_weight=(--m 64 "${work[@]}")
measured resident_second --b "@$w1" "${one_weight[@]}" --concurrency 64 --channels 8
busy >"$out/resident_both.busy_before.txt"
bench resident_both_0 --b "@$w0" "${one_weight[@]}" --concurrency 32 --channels 4 &
first=$!
bench resident_both_1 --b "@$w1" "${one_weight[@]}" --concurrency 32 --channels 4
wait "$first"
busy >"$out/resident_both.busy_after.txt"
"$cli" matmul --target "$target" --a "@$a0" --b "@$w1" >"$out/cross_device.txt" 2>&1
echo "exit $?" >>"$out/cross_device.txt"
stop

"$py" "$here/multi_device_summary.py" "$out"
