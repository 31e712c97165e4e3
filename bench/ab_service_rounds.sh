#!/usr/bin/env bash
# A/B of two gemm-server builds on the batching cases of gpu_service_bench.sh, one fresh
# server per case and the two builds alternating, so run-to-run drift on the machine
# falls on both (a single run of the whole script spreads over +-15% on the H200).
# Usage: bench/ab_service_rounds.sh DIR_A DIR_B [ROUNDS]   (each DIR holds gemm-server and
#   gemm-cli; the server flags are gpu_service_bench.sh's). Env: BACKEND (cuda), DURATION_S (5),
#   CASES ("b64_128 b64_256": bBATCH_SHAPE, the script's batch sizes 64 and 1).
# Prints one line per case and build (req/s, server CPU us per request), then each case's
# mean ratio B / A.
set -uo pipefail
ulimit -n 65536 2>/dev/null || true
a=${1:?usage: ab_service_rounds.sh DIR_A DIR_B [ROUNDS]}
b=${2:?usage: ab_service_rounds.sh DIR_A DIR_B [ROUNDS]}
rounds=${3:-5}
backend=${BACKEND:-cuda}
cases=${CASES:-b64_128 b64_256}
port=${PORT:-50777}
out=$(mktemp -d)
py=$(command -v python3 || echo /usr/bin/python3)
for round in $(seq "$rounds"); do
  # Alternate which build goes first, so neither always follows the other.
  order="A B"; [ $((round % 2)) -eq 0 ] && order="B A"
  for run in $order; do
    dir=$([ "$run" = A ] && echo "$a" || echo "$b")
    for case in $cases; do
      batch=${case%_*}; batch=${batch#b}; shape=${case#*_}
      "$dir/gemm-server" --backend="$backend" --port "$port" --metrics_port 9477 \
        --max_batch_size="$batch" --max_queue_delay_us=100 >"$out/server.log" 2>&1 &
      pid=$!
      for _ in $(seq 100); do
        "$dir/gemm-cli" health --target "127.0.0.1:$port" >/dev/null 2>&1 && break
        sleep 0.1
      done
      callers=$([ "$shape" = 128 ] && echo 128 || echo 64)
      "$dir/gemm-cli" bench --target "127.0.0.1:$port" --m "$shape" --n "$shape" --k "$shape" \
        --dtype float16 --precision fp16_tensor --concurrency "$callers" --channels 8 \
        --duration_s "${DURATION_S:-5}" --warmup_s 1 --server_pid "$pid" --json >"$out/r.json" 2>/dev/null
      "$py" -c 'import json,sys; r = json.load(open(sys.argv[1]))
print("round %s %s %s %.0f %.1f" % (*sys.argv[2:5], r["requests_per_s"], r["server_cpu_us_per_request"]))' \
        "$out/r.json" "$round" "$run" "$case" | tee -a "$out/rates.txt"
      kill -TERM "$pid"; wait "$pid" 2>/dev/null
    done
  done
done
awk '{sum[$4 " " $3] += $5; cpu[$4 " " $3] += $6; n[$4 " " $3]++}
     END {for (c in n) if (c ~ / A$/) {split(c, p, " "); b = p[1] " B";
            printf "%s: A %.0f, B %.0f req/s (mean of %d); B / A = %.3f; server CPU %.1f vs %.1f us/req\n",
                   p[1], sum[c] / n[c], sum[b] / n[b], n[c], (sum[b] / n[b]) / (sum[c] / n[c]),
                   cpu[c] / n[c], cpu[b] / n[b]}}' \
  "$out/rates.txt"
rm -rf "$out"
