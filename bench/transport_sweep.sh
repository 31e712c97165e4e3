#!/usr/bin/env bash
# How the transport settings of proto/transport_arguments.h were chosen: grpc-floor (gRPC
# alone, no compute) under each candidate gRPC argument, given to both ends, for one big
# request on one connection and for many small ones. A setting is kept only where it
# beats the defaults in this table.
# Usage: bench/transport_sweep.sh BIN_DIR [cpu|cuda]   (BIN_DIR as for transport_bench.sh)
set -uo pipefail
ulimit -n 65536 2>/dev/null || true
bin=${1:?usage: transport_sweep.sh BIN_DIR [cpu|cuda]}
mode=${2:-cpu}
duration=${DURATION_S:-3}
exe() {
  for p in "$bin/$1" "$bin/client_cli/$1" "$bin/bench/$1"; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
  echo "missing $1 under $bin" >&2; exit 1
}
cli=$(exe gemm-cli) floor=$(exe grpc-floor)
port=50782
if [ "$mode" = cuda ]; then
  big=(--m 4096 --n 4096 --k 4096 --dtype float16)
  small=(--m 128 --n 128 --k 128 --dtype float16 --concurrency 128 --channels 8 --async)
else
  big=(--m 4096 --n 1 --k 4096)
  small=(--m 128 --n 128 --k 128 --concurrency 1)
fi
candidates=(
  ""
  "grpc.experimental.tcp_read_chunk_size=8192"
  "grpc.http2.write_buffer_size=65536"
  "grpc.http2.max_frame_size=1048576"
  "grpc.http2.max_frame_size=4194304"
  "grpc.experimental.tcp_read_chunk_size=4194304"
  "grpc.experimental.tcp_min_read_chunk_size=1048576"
  "grpc.http2.lookahead_bytes=16777216"
  "grpc.http2.bdp_probe=0"
)
value() { python3 -c "import json,sys; j=json.load(open('$1')); print(round(j['$2'], 1))" 2>/dev/null || echo "-"; }
echo "| gRPC arguments (both ends) | big: payload MB/s | big: p50 ms | small: req/s |"
echo "|---|---:|---:|---:|"
for args in "${candidates[@]}"; do
  "$floor" --port "$port" ${args:+--grpc_arg "$args"} >/dev/null 2>&1 &
  pid=$!
  sleep 0.5
  "$cli" bench --target "127.0.0.1:$port" "${big[@]}" --duration_s "$duration" --warmup_s 1 \
    --json ${args:+--grpc_arg "$args"} >/tmp/sweep_big.json 2>/dev/null
  "$cli" bench --target "127.0.0.1:$port" "${small[@]}" --duration_s "$duration" --warmup_s 1 \
    --json ${args:+--grpc_arg "$args"} >/tmp/sweep_small.json 2>/dev/null
  p50=$(python3 -c "import json; print(round(json.load(open('/tmp/sweep_big.json'))['latency_ms']['p50'], 1))" 2>/dev/null || echo -)
  echo "| ${args:-(gemmd defaults)} | $(value /tmp/sweep_big.json payload_mb_per_s) | $p50 |" \
       "$(value /tmp/sweep_small.json requests_per_s) |"
  kill "$pid"
  wait "$pid" 2>/dev/null
done
