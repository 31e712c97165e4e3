#!/usr/bin/env bash
# The CPU-backend service benchmark of docs/BENCHMARKS.md, in one run:
#   loopback TCP ceiling (iperf3, one stream), in-process OpenBLAS (gemm-cli bench --local)
#   and the service over gRPC (gemm-cli bench), at 1024^3 and 128^3 FP32, concurrency 1 and 8.
# Usage: bench/cpu_service_bench.sh [BUILD_DIR]   (needs iperf3: apt-get install iperf3)
set -euo pipefail
build=${1:-build}
cli="$build/client_cli/gemm-cli"
server="$build/server/gemm-server"
duration=${DURATION_S:-10}
warmup=${WARMUP_S:-2}
port=${PORT:-50777}

command -v iperf3 >/dev/null || { echo "needs iperf3 (apt-get install iperf3)" >&2; exit 1; }
echo "## $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
sleep 0.5
echo "### iperf3 -c 127.0.0.1 -t $duration (one stream)"
iperf3 -c 127.0.0.1 -p 5299 -t "$duration" -f m | grep -E "sender|receiver"
wait

"$server" --port "$port" --metrics_port -1 2>/dev/null &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null' EXIT
sleep 1

for size in 1024 128; do
  for c in 1 8; do
    for mode in local grpc; do
      flags=(--m "$size" --n "$size" --k "$size" --concurrency "$c" --duration_s "$duration"
             --warmup_s "$warmup" --json)
      [ "$mode" = local ] && flags+=(--local) || flags+=(--target "127.0.0.1:$port")
      "$cli" bench "${flags[@]}"
    done
  done
done

# The transport side by side: loopback TCP, grpc-floor, gemm-server and the Python peer
# (payload rate, small requests, CPU per request).
kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null
"$(dirname "$0")/transport_bench.sh" "$build" cpu
