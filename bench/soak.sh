#!/usr/bin/env bash
# Soak: one gemm-server (CPU backend, loopback) under a steady mixed load for a bounded
# time, with its resources sampled at the start and the end.
#
#   bench/soak.sh [BUILD_DIR] [SECONDS]      (defaults: build, 600; SOAK_SECONDS also works)
#
# Load, all at once, each loop a new client process (so a new connection) per call:
#   matmul     random shapes, FP32 / FP16 / BF16 operands, both precisions, --verify
#   quantized  INT8 and NVFP4, square and weight-only, --verify
#   resident   put a weight, multiply by handle, remove it
#   deadlines  calls whose deadline passes while they run (DEADLINE_EXCEEDED expected)
#   hostile    malformed Matmul / PutTensor bytes, calls cancelled mid-flight, unknown
#              methods (Python grpcio, raw bytes)
# Every call must end as expected (a --verify failure or an unexpected code fails the
# soak). After the load stops and the server has settled: gemm_inflight_requests must be
# 0 (every accepted call was answered), and RSS, open descriptors and threads must not
# have grown past the start's (sampled under load after a quarter of the time) by more
# than a bound: RSS +64 MiB or +25%, descriptors +16, threads +8. The server's message
# pool is capped at 64 MiB so that pooled buffers do not pass for growth. Prints a table;
# exit 0 when all hold.
set -euo pipefail
BUILD=${1:-build}
SECONDS_TOTAL=${2:-${SOAK_SECONDS:-600}}
SERVER=$BUILD/server/gemm-server
CLI=$BUILD/client_cli/gemm-cli
PY=/usr/bin/python3
for f in "$SERVER" "$CLI"; do [ -x "$f" ] || { echo "soak: $f not built" >&2; exit 2; }; done

WORK=$(mktemp -d /tmp/gemmd-soak.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$SERVER" --host 127.0.0.1 --port 0 --metrics_port 0 --backend cpu \
  --tensor_store_bytes $((256 << 20)) --message_pool_bytes $((64 << 20)) --shutdown_grace_s 5 > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do
  grep -q "event=server_started" "$WORK/server.log" && break
  sleep 0.1
done
line=$(grep "event=server_started" "$WORK/server.log") || { cat "$WORK/server.log"; exit 1; }
GRPC=$(sed -E 's/.* grpc=([0-9.]+:[0-9]+) .*/\1/' <<< "$line")
METRICS=$(sed -E 's/.* metrics=([0-9.]+:[0-9]+)\/metrics.*/\1/' <<< "$line")
T="--target=$GRPC"

metrics_text() {
  "$PY" -c "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen('http://$METRICS/metrics', timeout=5).read().decode())"
}

sample() {  # rss_kb fds threads inflight
  local rss fds threads inflight
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status")
  fds=$(ls "/proc/$SERVER_PID/fd" | wc -l)
  threads=$(awk '/^Threads/ {print $2}' "/proc/$SERVER_PID/status")
  inflight=$(metrics_text | awk '/^gemm_inflight_requests / {print $2}')
  echo "$rss $fds $threads ${inflight:-?}"
}

END=$(( $(date +%s) + SECONDS_TOTAL ))
# A client that hangs is a failure of the soak, not a hang of it: 120 s, then exit 124.
cli() {
  timeout 120 "$CLI" "$@" || { local rc=$?; [ $rc -eq 124 ] && echo "client hung 120 s: $*"; return $rc; }
}
fail() { echo "FAIL [$1]: $2" >> "$WORK/failures"; }

loop_matmul() {
  local i=0 shapes=("64 64 64" "257 129 300" "1 512 512" "33 17 65" "128 128 1024")
  local dtypes=(float32 float16 bfloat16)
  while [ "$(date +%s)" -lt "$END" ]; do
    read -r m n k <<< "${shapes[$((i % 5))]}"
    local dtype=${dtypes[$((i % 3))]} precision=auto
    [ "$dtype" = float32 ] && [ $((i % 2)) -eq 1 ] && precision=fp16_tensor
    cli matmul "$T" --m "$m" --n "$n" --k "$k" --dtype "$dtype" --precision "$precision" \
      --seed "$i" --verify > "$WORK/matmul.out" 2>&1 || fail matmul "$(tail -2 "$WORK/matmul.out")"
    i=$((i + 1)); echo "$i" > "$WORK/count.matmul"
  done
}

loop_quantized() {
  local i=0
  while [ "$(date +%s)" -lt "$END" ]; do
    local fmt=int8 wo=""
    [ $((i % 2)) -eq 1 ] && fmt=nvfp4
    [ $((i % 4)) -ge 2 ] && wo=--weight_only
    cli quantized "$T" --format "$fmt" $wo --m 16 --n 256 --k 512 --seed "$i" --verify \
      > "$WORK/quantized.out" 2>&1 || fail quantized "$(tail -2 "$WORK/quantized.out")"
    i=$((i + 1)); echo "$i" > "$WORK/count.quantized"
  done
}

loop_resident() {
  local i=0
  "$PY" -c "import numpy as np; np.save('$WORK/w.npy', np.random.default_rng(1).standard_normal((512, 256)).astype(np.float32))"
  while [ "$(date +%s)" -lt "$END" ]; do
    local h
    h=$(cli put "$T" "$WORK/w.npy" --label soak 2> "$WORK/put.err") || { fail resident "$(cat "$WORK/put.err")"; continue; }
    cli matmul "$T" --b "@$h" --m 8 --verify > "$WORK/resident.out" 2>&1 ||
      fail resident "$(tail -2 "$WORK/resident.out")"
    cli rm "$T" "$h" > /dev/null 2>&1 || fail resident "rm $h"
    i=$((i + 1)); echo "$i" > "$WORK/count.resident"
  done
}

loop_deadlines() {
  local i=0
  while [ "$(date +%s)" -lt "$END" ]; do
    if cli matmul "$T" --m 1024 --n 1024 --k 1024 --timeout_s 0.005 > "$WORK/deadline.out" 2>&1; then
      :  # finished in time: allowed
    elif ! grep -q "DEADLINE_EXCEEDED" "$WORK/deadline.out" || grep -q "client hung" "$WORK/deadline.out"; then
      fail deadlines "$(tail -2 "$WORK/deadline.out")"
    fi
    i=$((i + 1)); echo "$i" > "$WORK/count.deadlines"
  done
}

loop_hostile() {
  "$PY" - "$GRPC" "$END" "$WORK" <<'EOF'
import os, random, sys, time
import grpc
target, end, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(7)
count = 0
failures = open(os.path.join(work, "failures"), "a")
while time.time() < end:
    with grpc.insecure_channel(target) as channel:  # a new connection each round
        matmul = channel.unary_unary("/gemm.v1.GemmService/Matmul")
        put = channel.stream_unary("/gemm.v1.GemmService/PutTensor")
        unknown = channel.unary_unary("/gemm.v1.GemmService/NoSuchMethod")
        junk = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 2048)))
        # Random bytes may still parse as some request: what validation may then say.
        refused = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
                   grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND}
        for call, arg, expected in (
                (matmul, junk, refused),
                (put, iter([junk]), refused),
                (unknown, b"", {grpc.StatusCode.UNIMPLEMENTED})):
            try:
                call(arg, timeout=10)
                failures.write(f"FAIL [hostile]: malformed call answered OK\n")
            except grpc.RpcError as e:
                if e.code() not in expected:
                    failures.write(f"FAIL [hostile]: {e.code()} {e.details()}\n")
        # A call cancelled while the server works on it.
        future = matmul.future(junk[:1] + bytes(64), timeout=10)
        future.cancel()
    count += 1
    with open(os.path.join(work, "count.hostile"), "w") as f:
        f.write(str(count))
EOF
}

"$CLI" matmul "$T" --m 256 --n 256 --k 256 > /dev/null

loop_matmul & PIDS+=($!)
loop_quantized & PIDS+=($!)
loop_resident & PIDS+=($!)
loop_deadlines & PIDS+=($!)
loop_hostile & PIDS+=($!)
# The start's sample is taken under load, after a quarter of the time (at most 60 s):
# by then the pools, caches and threads a steady load needs exist, and what grows after
# that is what the soak looks for.
sleep $(( SECONDS_TOTAL / 4 < 60 ? SECONDS_TOTAL / 4 : 60 ))
read -r rss0 fds0 threads0 inflight0 <<< "$(sample)"
peak_rss=$rss0
while [ "$(date +%s)" -lt "$END" ]; do
  sleep 5
  read -r rss _ _ _ <<< "$(sample)"
  [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
done
for p in "${PIDS[@]}"; do wait "$p" || true; done
PIDS=()
sleep 2  # let the last answers go out and the server settle
read -r rss1 fds1 threads1 inflight1 <<< "$(sample)"

count() { cat "$WORK/count.$1" 2>/dev/null || echo 0; }
printf '%-24s %12s %12s\n' "" "start (load)" end
printf '%-24s %12s %12s\n' "RSS (MiB)" $((rss0 / 1024)) $((rss1 / 1024))
printf '%-24s %12s %12s\n' "open descriptors" "$fds0" "$fds1"
printf '%-24s %12s %12s\n' "threads" "$threads0" "$threads1"
printf '%-24s %12s %12s\n' "gemm_inflight_requests" "$inflight0" "$inflight1"
echo "peak RSS $((peak_rss / 1024)) MiB; ${SECONDS_TOTAL} s; rounds: matmul $(count matmul)," \
  "quantized $(count quantized), resident $(count resident), deadlines $(count deadlines)," \
  "hostile $(count hostile)"
metrics_text | awk '/^gemm_requests_total/ && $2 > 0 {
  match($0, /code="[A-Z_]+"/); code = substr($0, RSTART + 6, RLENGTH - 7); sum[code] += $2 }
  END { printf "answers by code:"; for (c in sum) printf " %s=%d", c, sum[c]; print "" }'

status=0
rss_bound=$(( rss0 + (rss0 / 4 > 65536 ? rss0 / 4 : 65536) ))
[ "$rss1" -le "$rss_bound" ] || { echo "FAIL: RSS grew from $rss0 to $rss1 kB"; status=1; }
[ "$fds1" -le $((fds0 + 16)) ] || { echo "FAIL: descriptors grew from $fds0 to $fds1"; status=1; }
[ "$threads1" -le $((threads0 + 8)) ] || { echo "FAIL: threads grew from $threads0 to $threads1"; status=1; }
[ "$inflight1" = 0 ] || { echo "FAIL: $inflight1 calls still in flight after the load stopped"; status=1; }
if [ -s "$WORK/failures" ]; then
  echo "FAIL: $(wc -l < "$WORK/failures") calls ended unexpectedly; first ones:"
  head -5 "$WORK/failures"
  status=1
fi
[ "$(count matmul)" -gt 0 ] && [ "$(count hostile)" -gt 0 ] || { echo "FAIL: a load loop did not run"; status=1; }
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || { echo "FAIL: gemm-server exited $? on SIGTERM"; status=1; }
SERVER_PID=
[ $status -eq 0 ] && echo "soak: PASS" || echo "soak: FAIL"
exit $status
