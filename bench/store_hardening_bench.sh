#!/usr/bin/env bash
# The tensor store and drain measurements of docs/RELIABILITY.md ("Hostile and careless
# callers of the tensor store"), on the CPU backend, client and server on one machine.
# Each scenario starts its own gemm-server and reads its RSS (VmRSS) and peak (VmHWM)
# from /proc:
#   1. 600 GetTensor streams of one 4 MiB tensor, never read, on 2 connections, with
#      --max_inflight_bytes=256MiB: RSS growth, and RSS after the clients go
#   2. the same where downloads copy their chunks (--download_copies, as on a GPU): the
#      crowd past the cap is refused
#   3. 30 000 [1,1] PutTensor calls into a 1 MiB store: how many fit, RSS growth
#   4. a PutTensor header and then nothing: when the server ends it, the store's bytes
#   5. SIGTERM while three 72 MiB Matmuls (FP32 3072^2, a grpcio client) still upload
# Usage: bench/store_hardening_bench.sh [BUILD_DIR]   (SERVER=... CLI=... to measure another
# gemm-server; EXTRA=0 skips the run that needs this version's --download_copies)
set -uo pipefail
build=${1:-build}
server=${SERVER:-$build/server/gemm-server}
cli=${CLI:-$build/client_cli/gemm-cli}
hostile=$build/tests/hostile-client
extra=${EXTRA:-1}
here=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-56400}
log=$(mktemp)
stubs=$(mktemp -d)
trap 'rm -rf "$stubs" "$log"' EXIT
"$here/../clients/python/generate.sh" "$stubs" >/dev/null
export GEMMD_PROTO_DIR=$stubs
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
tensor() {  # a random [rows, cols] FP32 .npy file
  /usr/bin/python3 -c "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(1).standard_normal(($2, $3)).astype(np.float32))" "$1"
}

echo "## $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $server"
npy=$(mktemp --suffix=.npy)
tensor "$npy" 1024 1024

for copies in 0 1; do
  if [ "$copies" = 0 ]; then
    echo "### 1. 600 never-read GetTensor streams of a 4 MiB tensor (--max_inflight_bytes=256MiB)"
    start --max_inflight_bytes=268435456
  else
    [ "$extra" = 1 ] || continue
    echo "### 2. the same, chunks copied out as on a GPU (--download_copies)"
    start --max_inflight_bytes=268435456 --download_copies
  fi
  handle=$("$cli" put "$npy" --target "127.0.0.1:$port" 2>/dev/null)
  before=$(rss_mb "$pid" VmRSS)
  "$hostile" download-never-read --port "$port" --handle "$handle" --streams 600 \
    --connections 2 --hold_s 10
  peak=$(rss_mb "$pid" VmHWM)
  sleep 2
  echo "RSS: ${before} MB with the tensor stored, peak ${peak} MB (+$((peak - before)) MB), ${before} -> $(rss_mb "$pid" VmRSS) MB 2 s after the client left"
  stop
done

echo "### 3. 30 000 [1,1] tensors into a 1 MiB store"
start --tensor_store_bytes=1048576
before=$(rss_mb "$pid" VmRSS)
/usr/bin/python3 "$here/store_probe.py" tiny-puts --target "127.0.0.1:$port" --count 30000
echo "RSS ${before} -> $(rss_mb "$pid" VmRSS) MB (peak $(rss_mb "$pid" VmHWM) MB)"
stop

echo "### 4. a header-only upload (--upload_idle_timeout_s=10, the default)"
start
/usr/bin/python3 "$here/store_probe.py" idle-upload --target "127.0.0.1:$port" --hold_s 20
stop

echo "### 5. SIGTERM while three 72 MiB Matmuls upload"
start --metrics_port=$((port + 1))
/usr/bin/python3 "$here/store_probe.py" drain --target "127.0.0.1:$port" --server_pid "$pid" \
  --metrics "127.0.0.1:$((port + 1))" --calls 3 --n 3072
wait "$pid"
echo "server exit status $?"
grep -E "event=(shutdown_started|shutdown_complete)" "$log" | sed 's/^/  /'
rm -f "$npy"
