#!/usr/bin/env bash
# The GPU service benchmark of docs/BENCHMARKS.md (issue 4's acceptance), in one run on a
# GPU machine: gemm-bench's in-process copies + kernel at 4096^3, then gemm-server on the
# CUDA backend driven by gemm-cli bench: batching on vs --max_batch_size=1 (128 x 128^3
# and 64 x 256^3 FP16_TENSOR), one 4096^3 FP16_TENSOR request at a time, and overload
# (concurrency 512, small queue) with the server's peak RSS; on a machine with two GPUs
# or more, bench/multi_device_bench.sh (one GPU against all, resident weights on each).
# Usage: bench/gpu_service_bench.sh [BIN_DIR]   (BIN_DIR holds gemm-server, gemm-cli,
# gemm-bench, grpc-floor, iperf3; default .devpack/bin as device-pack lays it out). Ends
# with the transport benchmark (transport_bench.sh). Prints JSON lines, then a
# summary table (bench/gpu_service_summary.py).
set -uo pipefail
ulimit -n 65536 2>/dev/null || true  # 512 callers, 16 channels: plenty of descriptors
bin=${1:-.devpack/bin}
duration=${DURATION_S:-5}
warmup=${WARMUP_S:-1}
port=${PORT:-50777}
mport=${METRICS_PORT:-9477}
out=${OUT_DIR:-/tmp/gpu_service_bench}
mkdir -p "$out"
rm -f "$out"/*.json

echo "## $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores"

"$bin/gemm-bench" --filter='square 4096x4096x4096 F16T/f16-in' --kernels=auto --with-copies \
  --json="$out/gemm_bench_4096.json" 2>&1 | tail -8

server_pid=
start_server() {
  "$bin/gemm-server" --backend=cuda --devices="${DEVICES:-0}" --port "$port" \
    --metrics_port "$mport" "$@" >"$out/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    "$bin/gemm-cli" health --target "127.0.0.1:$port" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server did not start:"; cat "$out/server.log"; return 1
}
stop_server() {
  kill -TERM "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
}
trap stop_server EXIT
scrape() {  # the metrics page (curl, or Python where there is no curl)
  curl -s "127.0.0.1:$mport/metrics" 2>/dev/null ||
    python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:$mport/metrics').read().decode())"
}
cpu_s() {  # user + system CPU seconds a process has used so far
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"
}
bench() {  # NAME ARGS...: one gemm-cli bench run, its JSON kept as NAME.json
  local name=$1
  shift
  local before
  before=$(cpu_s "$server_pid")
  local TIMEFORMAT='%U %S %R'
  { time "$bin/gemm-cli" bench --target "127.0.0.1:$port" --duration_s "$duration" \
      --warmup_s "$warmup" --json "$@" >"$out/$name.json"; } 2>"$out/$name.time"
  cat "$out/$name.json"
  # Where the CPU went (client and server share the host): seconds over the whole run.
  read -r user sys real < <(tail -1 "$out/$name.time")
  awk -v a="$(cpu_s "$server_pid")" -v b="$before" -v u="$user" -v s="$sys" -v r="$real" \
    -v n="$name" 'BEGIN {printf "cpu %s: server %.1f s, client %.1f s, over %.1f s wall\n",
                         n, a - b, u + s, r}'
}

for batch in 64 1; do
  start_server --max_batch_size=$batch --max_queue_delay_us=100 || exit 1
  bench "b${batch}_128" --m 128 --n 128 --k 128 --dtype float16 --precision fp16_tensor \
    --concurrency 128 --channels 8
  bench "b${batch}_256" --m 256 --n 256 --k 256 --dtype float16 --precision fp16_tensor \
    --concurrency 64 --channels 8
  # The same with the lighter callback-API client.
  bench "b${batch}_128_async" --m 128 --n 128 --k 128 --dtype float16 \
    --precision fp16_tensor --concurrency 128 --channels 8 --async
  bench "b${batch}_256_async" --m 256 --n 256 --k 256 --dtype float16 \
    --precision fp16_tensor --concurrency 64 --channels 8 --async
  stop_server
done

start_server || exit 1
bench big_4096 --m 4096 --n 4096 --k 4096 --dtype float16 --precision fp16_tensor \
  --concurrency 1 --duration_s $((duration * 2))
stop_server

# Overload: 512 callers against a queue of 64 jobs and a 256 MiB in-flight cap.
start_server --max_queue_size=64 --max_inflight_bytes=$((256 << 20)) || exit 1
(
  while kill -0 "$server_pid" 2>/dev/null; do
    grep VmRSS "/proc/$server_pid/status" 2>/dev/null | awk '{print $2}'
    sleep 0.2
  done
) >"$out/rss.txt" &
sampler=$!
bench overload_512 --m 256 --n 256 --k 256 --dtype float16 --precision fp16_tensor \
  --concurrency 512 --channels 16 --timeout_s 30
sleep 1
scrape >"$out/metrics_overload.txt"
stop_server
kill "$sampler" 2>/dev/null
grep -E '^gemm_(requests_total|inflight_requests|queue_depth|batch_size_(sum|count)|device_memory_bytes)' \
  "$out/metrics_overload.txt"
# The same without batching and a queue of 16: the device path is the bottleneck there
# (not the transport), so more callers are turned away.
start_server --max_batch_size=1 --max_queue_size=16 || exit 1
bench overload_b1_512 --m 256 --n 256 --k 256 --dtype float16 --precision fp16_tensor \
  --concurrency 512 --channels 16 --timeout_s 30
scrape | grep -E '^gemm_(requests_total|inflight_requests|queue_depth)'
stop_server

# RSS over the run: bounded means the later samples do not keep climbing.
awk '{a[NR]=$1} END {n=NR; if (n==0) exit; m=a[1]; for(i=1;i<=n;i++) if(a[i]>m) m=a[i];
  printf "server RSS kB: first %d, 25%% %d, 50%% %d, 75%% %d, last %d, peak %d (%d samples)\n",
  a[1], a[int(n/4)+1], a[int(n/2)+1], a[int(3*n/4)+1], a[n], m, n}' "$out/rss.txt"

python3 "$(dirname "$0")/gpu_service_summary.py" "$out"

# Several GPUs: one GPU against all of them, resident weights on each (its own table).
if [ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ]; then
  OUT_DIR="$out/multi_device" "$(dirname "$0")/multi_device_bench.sh" "$bin" cuda
fi

# The transport side by side (needs grpc-floor and iperf3 in BIN_DIR or on PATH).
"$(dirname "$0")/transport_bench.sh" "$bin" cuda
