#!/usr/bin/env bash
# One GPU session's look at the FP64 kernels (docs/KERNELS.md, "The ladder: FP64"), in the
# order that keeps what matters most when the machine's time runs out: every FP64 kernel
# timed against cublasDgemm (gemm-bench checks each result against cuBLAS's), the FP64
# kernel tests, more rounds at 4096^3 and 8192^3, then per-instruction stall profiles
# (ncu's source page, summarised by bench/sass_stalls.py) of the kernels named in
# PROFILE and of cuBLAS's DGEMM. Each step after the first two is skipped once the run
# has taken more than its share of BUDGET_S.
#
# Usage: bench/dgemm_ladder.sh BIN_DIR [OUT_DIR]
#   BIN_DIR holds gemm-bench and gpu_kernels_test (a build directory's bench/ and
#   tests/gpu/, or a device-pack .devpack/bin).
# Env: KERNELS (gemm-bench --kernels substring, default dmma1688), ROUNDS (extra rounds at
#   4096^3 and 8192^3, default 1), PROFILE (space-separated NAME:REGEX pairs: a
#   --kernels substring and a regex on the kernel's mangled name; default step 9's NN
#   kernel), BUDGET_S (default 420).
# Every timing is --paired: cuBLAS is timed again beside each kernel, launch by launch, since
# a GPU at its power limit runs whatever is timed later at lower clocks (docs/BENCHMARKS.md,
# "Our DGEMM, step 9").
set -uo pipefail
bin=${1:?usage: dgemm_ladder.sh BIN_DIR [OUT_DIR]}
out=${2:-/tmp/dgemm_ladder}
here=$(cd "$(dirname "$0")" && pwd)
kernels=${KERNELS:-dmma1688}
rounds=${ROUNDS:-1}
profile=${PROFILE:-tma_128x64x16_s4_g8_u:DgemmDmmaTmaKernelILb1ELb0ELb0E}
budget=${BUDGET_S:-420}
mkdir -p "$out"
big='square 4096x4096x4096 FP64,square 8192x8192x8192 FP64'
left() { [ "$SECONDS" -lt $((budget * $1 / 100)) ]; }  # within $1 % of the budget

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null; date -u
echo "== gemm-bench --paired --filter=FP64 --kernels=$kernels"
timeout $((budget / 4)) "$bin/gemm-bench" --paired --filter=FP64 --kernels="$kernels" \
  >"$out/bench.txt" 2>&1
grep "^|" "$out/bench.txt" | grep -v "^|---"
echo "== gpu_kernels_test: FP64 kernels, row plans"
timeout $((budget / 4)) "$bin/gpu_kernels_test" --gtest_filter='*dgemm*:RowPlanTest.*' \
  >"$out/tests.txt" 2>&1
grep -E "^\[  (PASSED|FAILED) |tests ran" "$out/tests.txt" | tail -12
for r in $(seq "$rounds"); do
  left 60 || break
  echo "== round $((r + 1)) at 4096^3 and 8192^3"
  timeout $((budget / 6)) "$bin/gemm-bench" --paired --filter="$big" --kernels="$kernels" 2>&1 |
    grep "^| [48]" | tee -a "$out/rounds.txt"
done
for pair in $profile; do
  left 75 || break
  name=${pair%%:*} regex=${pair#*:}
  timeout 60 ncu --clock-control none --kernel-name-base mangled -k "regex:$regex" -c 1 \
    --section SourceCounters --page source --print-source sass --csv \
    "$bin/gemm-bench" --filter='square 4096x4096x4096 FP64' --kernels="$name" --iters=5 \
    --warmup=0 >"$out/stalls_$name.csv" 2>&1
  echo "== stalls: $name"
  python3 "$here/sass_stalls.py" "$out/stalls_$name.csv" --top 8 | head -30
done
if left 90; then
  # cuBLAS's DGEMM kernel on sm_90 (its name has no capital letters of ours).
  timeout 60 ncu --clock-control none -k "regex:xmma|cutlass|f64|d1688|dmma" -c 1 \
    --section SourceCounters --page source --print-source sass --csv \
    "$bin/gemm-bench" --filter='square 4096x4096x4096 FP64' --kernels=s3_g8 --iters=5 \
    --warmup=0 >"$out/stalls_cublas.csv" 2>&1
  echo "== stalls: cuBLAS"
  python3 "$here/sass_stalls.py" "$out/stalls_cublas.csv" --top 8 | head -30
fi
date -u
