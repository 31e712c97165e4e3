#!/usr/bin/env bash
# The reliability measurements of docs/RELIABILITY.md, on the CPU backend, client and
# server on one machine. Each scenario starts its own gemm-server and reads the server's
# peak RSS (VmHWM) from /proc:
#   1. a client that never reads its replies (zero HTTP/2 receive window), 8 calls of
#      A [8192,1] x B [1,8192] (65 KB sent, 268 MB back each), --max_inflight_bytes=1e9
#   2. one message announcing 1.9 GB to a server with --max_message_bytes=64 MiB
#   3. 512 callers (gemm-cli bench --async) against --max_queue_size=64, 512^3 FP32:
#      default caps, then --max_inflight_bytes and --grpc_buffer_bytes at 256 MiB each
#   4. SIGTERM twice (30 ms apart) while 8 callers keep calling: exit status and codes
# Usage: bench/cpu_robustness_bench.sh      (SERVER=... to measure another gemm-server
# binary; EXTRA=0 skips the runs that need this version's flags)
set -uo pipefail
server=${SERVER:-build/server/gemm-server}
cli=${CLI:-build/client_cli/gemm-cli}
hostile=${HOSTILE:-build/tests/hostile-client}
port=${PORT:-56300}
extra=${EXTRA:-1}
log=$(mktemp)
pid=

start() {
  "$server" --backend=cpu --host=127.0.0.1 --port="$port" --metrics_port=-1 "$@" 2>"$log" &
  pid=$!
  for _ in $(seq 100); do
    "$cli" health --target "127.0.0.1:$port" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server did not start:"; cat "$log"; exit 1
}
stop() {
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
rss_mb() { awk -v k="$2" '$1 == k":" {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

echo "## $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $server"

echo "### 1. a client that never reads (cap 1e9 bytes)"
start --max_inflight_bytes=1000000000
echo "start RSS $(rss_mb "$pid" VmRSS) MB"
"$hostile" never-read --port "$port" --calls 8 --m 8192 --n 8192 --k 1 --hold_s 8
echo "peak RSS $(rss_mb "$pid" VmHWM) MB (cap 1000 MB: within +50% means <= 1500)"
sleep 2
echo "RSS 2 s after the client left: $(rss_mb "$pid" VmRSS) MB"
stop

echo "### 2. a 1.9 GB message to a 64 MiB server"
start --max_message_bytes=67108864
"$hostile" oversize --port "$port" --prefix_bytes 1992294400
echo "peak RSS $(rss_mb "$pid" VmHWM) MB, RSS after $(rss_mb "$pid" VmRSS) MB"
stop

overload() {
  start --max_queue_size=64 "$@"
  "$cli" bench --target "127.0.0.1:$port" --m 512 --n 512 --k 512 --concurrency 512 --async \
    --channels 8 --duration_s 10 --warmup_s 2 | grep -E '^(requests|latency|errors|error lat)'
  echo "peak RSS $(rss_mb "$pid" VmHWM) MB"
  stop
}
echo "### 3. 512 callers against --max_queue_size=64 (default caps: 4 GiB in flight, 1 GiB gRPC)"
overload
if [ "$extra" = 1 ]; then
  echo "### 3b. the same with --max_inflight_bytes and --grpc_buffer_bytes at 256 MiB each"
  overload --max_inflight_bytes=268435456 --grpc_buffer_bytes=268435456
fi

echo "### 4. SIGTERM twice under load"
start --shutdown_grace_s=10
bench_out=$(mktemp)
"$cli" bench --target "127.0.0.1:$port" --m 160 --n 160 --k 160 --concurrency 8 \
  --duration_s 4 --warmup_s 0 >"$bench_out" 2>&1 &
bench_pid=$!
sleep 1.5
kill -TERM "$pid"
sleep 0.03
kill -TERM "$pid"
wait "$pid"
echo "exit status $?"
wait "$bench_pid"
grep -E '^(requests|errors)' "$bench_out"
grep -cE 'event=signal_received' "$log" | sed 's/^/signal_received lines: /'
rm -f "$log" "$bench_out"
