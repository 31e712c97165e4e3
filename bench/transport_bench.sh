#!/usr/bin/env bash
# The transport benchmark of docs/BENCHMARKS.md ("Transport"): in one run, loopback TCP
# (iperf3, one stream and four), gRPC's own cost (grpc-floor: the API answered without
# computing) and gemm-server, driven by the same gemm-cli bench, for
#   - payload rate: one big request per caller (one caller on one connection, and four
#     callers on four; grpc-floor also 8 and 16), against TCP's rate with as many streams
#     (four for more than four callers); and one caller's big
#     request striped over 4, 8 and 16 connections, and through a shared-memory region
#     (big_shm: operands and C in /dev/shm, the call carrying slices; gemm-server only);
#     on CUDA the striped call against grpc-floor on the queues too, which answers the
#     tensor store's RPCs without keeping bytes (floor_async), and the same copying each
#     uploaded byte once (floor_copy): the least a striped call can take over gRPC;
#   - small requests: the request rate and the server's CPU per request (--server_pid);
#   - gemm-server over its Unix domain socket (server_unix) against loopback TCP;
#   - small requests on MatmulStreams (*_stream: gemm-cli bench --stream) against the same
#     requests as unary calls, and against grpc-floor's own stream (on the callback API;
#     on CUDA also on the completion queues).
# Then a side-by-side table (bench/transport_summary.py). On CUDA the small requests also
# run against grpc-floor on gRPC's completion-queue API, as gemm-server serves them
# (floor_async; floor_async_cb with the other methods on the callback API, as gemm-server
# had them before) and gemm-server with --cuda_sync=blocking.
#
# Usage: bench/transport_bench.sh BIN_DIR [cpu|cuda]
#   BIN_DIR: a build directory (build/) or one folder holding gemm-server, gemm-cli and
#   grpc-floor, as device-pack lays them out (and iperf3 when it is not on PATH).
#   cuda (the H200 host): 4096^3 FP16 in / FP32 out; 8^3 and 128^3 FP16, 128 callers.
#   cpu (the development machine): A 4096x4096 FP32 with N = 1 (64 MiB a call, transport
#   bound); 128^3 and 1024^3 FP32 at 1 and 8 callers, with the Python peer as well.
# Env: DURATION_S (default 5), WARMUP_S (1), OUT_DIR (/tmp/transport_bench).
set -uo pipefail
ulimit -n 65536 2>/dev/null || true
bin=${1:?usage: transport_bench.sh BIN_DIR [cpu|cuda]}
mode=${2:-cpu}
here=$(cd "$(dirname "$0")" && pwd)
duration=${DURATION_S:-5}
warmup=${WARMUP_S:-1}
out=${OUT_DIR:-/tmp/transport_bench}
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log
port=50781
target=127.0.0.1:$port
source "$here/server_control.sh"
server_bin=$(bench_exe gemm-server) && cli=$(bench_exe gemm-cli) &&
  floor_bin=$(bench_exe grpc-floor) || exit 1
iperf=$(command -v iperf3 || echo "$bin/iperf3")
py=$(command -v /usr/bin/python3 || command -v python3)

echo "## $(date -u +%Y-%m-%dT%H:%MZ) $mode, $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
[ "$mode" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1

# One iperf3 process per stream (iperf3 3.12 runs all its streams on one thread).
for streams in 1 4; do
  for s in $(seq "$streams"); do "$iperf" -s -1 -p $((5298 + s)) >/dev/null 2>&1 & done
  sleep 0.5
  for s in $(seq "$streams"); do
    "$iperf" -c 127.0.0.1 -p $((5298 + s)) -t "$duration" -J >"$out/iperf_${streams}_$s.json" &
  done
  wait
done

start() { bench_start "$@"; }  # NAME COMMAND...: a server on $port, answering
stop() { bench_stop; }
trap stop EXIT
bench() {  # SERVER CASE ARGS...: one gemm-cli bench run, kept as SERVER__CASE.json
  local server=$1 name=$2
  shift 2
  "$cli" bench --target "${bench_target:-127.0.0.1:$port}" --duration_s "$duration" --warmup_s "$warmup" \
    --server_pid "$pid" --json "$@" >"$out/${server}__${name}.json" 2>"$out/${server}__${name}.err" ||
    { echo "$server $name failed:"; tail -3 "$out/${server}__${name}.err"; }
}

if [ "$mode" = cuda ]; then
  big=(--m 4096 --n 4096 --k 4096 --dtype float16 --precision fp16_tensor)
  small=(--dtype float16 --precision fp16_tensor --concurrency 128 --channels 8 --async)
  # The same requests on 8 MatmulStreams (one per connection), 64 in flight on each.
  streamed=(--dtype float16 --precision fp16_tensor --stream --concurrency 8 --channels 8
            --outstanding 64)
  servers=(floor floor_async floor_async_cb floor_copy server server_unix server_blocking)
else
  big=(--m 4096 --n 1 --k 4096)
  small=()
  streamed=(--stream --concurrency 2 --channels 2 --outstanding 32)
  servers=(floor server server_unix python)
fi
socket=/tmp/gemmd_transport_bench.sock
for server in "${servers[@]}"; do
  case $server in
    floor) start floor "$floor_bin" --port "$port" || exit 1 ;;
    floor_async) start floor_async "$floor_bin" --port "$port" --api async --threads 8 || exit 1 ;;
    # The same with the service's other methods on the callback API, as gemm-server has
    # them: what gRPC's callback threads cost the calls on the queues.
    floor_async_cb) start floor_async_cb "$floor_bin" --port "$port" --api async --threads 8 \
              --callback_methods || exit 1 ;;
    # The queues' floor copying each uploaded byte once out of gRPC's buffers, as a server
    # that stores them must (striped calls only).
    floor_copy) start floor_copy "$floor_bin" --port "$port" --api async --threads 8 \
              --copy_payloads || exit 1 ;;
    server) start server "$server_bin" --port "$port" --metrics_port -1 \
              --backend "$mode" || exit 1 ;;
    server_unix) start server_unix "$server_bin" --port "$port" --metrics_port -1 \
              --backend "$mode" --unix_socket "$socket" || exit 1 ;;
    server_blocking) start server_blocking "$server_bin" --port "$port" --metrics_port -1 \
              --backend cuda --cuda_sync blocking || exit 1 ;;
    python) start python "$py" "$here/python_peer.py" --port "$port" --workers 8 || exit 1 ;;
  esac
  # The same gemm-server over its Unix domain socket instead of loopback TCP.
  bench_target=; [ "$server" = server_unix ] && bench_target="unix:$socket"
  if [ "$server" = floor ] || [ "$server" = server ] || [ "$server" = server_unix ] ||
     [ "$server" = python ]; then
    # One connection per call (grpc-floor and the Python peer keep no tensors to stripe).
    bench "$server" big_c1 "${big[@]}" --concurrency 1 --stripes 1
    bench "$server" big_c4 "${big[@]}" --concurrency 4 --channels 4 --async --stripes 1
  fi
  if [ "$server" = floor ]; then
    # gRPC's own ceiling for these bytes: as many callers as a striped call has
    # connections, each on its own (a striped call's payload is measured against it).
    for c in 8 16; do
      bench floor "big_c$c" "${big[@]}" --concurrency "$c" --channels "$c" --async --stripes 1
    done
  fi
  if [ "$server" = floor_async ] || [ "$server" = floor_copy ]; then
    # gRPC's own cost of a striped call (floor_tensors.h: the store's RPCs answered, no
    # bytes kept), without and with the one copy of each uploaded byte.
    for stripes in 8 16; do
      bench "$server" "big_striped$stripes" "${big[@]}" --concurrency 1 --stripes "$stripes"
    done
    [ "$server" = floor_copy ] && { stop; continue; }
  fi
  if [ "$server" = server ]; then
    # The same call striped over the client's connection pool (client/striped_call.h).
    for stripes in 4 8 16; do
      bench "$server" "big_striped$stripes" "${big[@]}" --concurrency 1 --stripes "$stripes"
    done
    # Operands and C in a shared-memory region (a caller on this machine).
    bench "$server" big_shm "${big[@]}" --concurrency 1 --shm
  fi
  # Streams: gemm-server and grpc-floor (on either API) serve MatmulStream.
  has_stream=; case $server in floor|floor_async|server|server_unix) has_stream=1 ;; esac
  # gemm-server's streamed answers are checked against FP64 on a sample (the floor's are
  # zeros).
  streamed_here=("${streamed[@]}")
  case $server in floor*) ;; *) streamed_here+=(--verify) ;; esac
  if [ "$mode" = cuda ]; then
    bench "$server" small_8 --m 8 --n 8 --k 8 "${small[@]}"
    bench "$server" small_128 --m 128 --n 128 --k 128 "${small[@]}"
    if [ -n "$has_stream" ]; then
      bench "$server" small_8_stream --m 8 --n 8 --k 8 "${streamed_here[@]}"
      bench "$server" small_128_stream --m 128 --n 128 --k 128 "${streamed_here[@]}"
    fi
  else
    if [ -n "$has_stream" ]; then
      bench "$server" small_128_stream --m 128 --n 128 --k 128 "${streamed_here[@]}"
      bench "$server" small_8_stream --m 8 --n 8 --k 8 "${streamed_here[@]}"
    fi
    for c in 1 8; do
      bench "$server" "small_128_c$c" --m 128 --n 128 --k 128 --concurrency "$c"
      bench "$server" "mid_1024_c$c" --m 1024 --n 1024 --k 1024 --concurrency "$c"
    done
  fi
  stop
done
"$py" "$here/transport_summary.py" "$out"
