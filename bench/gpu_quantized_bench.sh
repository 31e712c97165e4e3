#!/usr/bin/env bash
# Issue 5's GPU numbers in one run (docs/BENCHMARKS.md, "Quantized"): gemm-bench's skinny
# table (weight-only INT8/NVFP4 vs cuBLAS FP16, M in {1,16,64}, N = K = 8192) and square
# table (4096^3 vs cuBLAS INT8 8I->32I and our hgemm_wmma), then gemm-server on the CUDA
# backend: gemm-cli quantized --verify per path (bytes on the wire, kernel, errors,
# server phases) and gemm-cli bench of QuantizedMatmul against Matmul FP16 on the same
# skinny shape (what the caller sees end to end).
# Usage: bench/gpu_quantized_bench.sh [BIN_DIR]   (default .devpack/bin, device-pack's
# layout: gemm-bench, gemm-server, gemm-cli).
set -uo pipefail
bin=${1:-.devpack/bin}
port=${PORT:-50778}
duration=${DURATION_S:-3}
echo "## $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

echo "### gemm-bench --quantized"
"$bin/gemm-bench" --quantized 2>/dev/null
echo "### gemm-bench --quantized-square=4096"
"$bin/gemm-bench" --quantized-square=4096 2>/dev/null

"$bin/gemm-server" --backend=cuda --devices=0 --port "$port" --metrics_port -1 \
  >/tmp/gpu_quantized_server.log 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 100); do
  "$bin/gemm-cli" health --target "127.0.0.1:$port" >/dev/null 2>&1 && break
  sleep 0.1
done
cli() { "$bin/gemm-cli" --target "127.0.0.1:$port" "$@"; }
echo "### gemm-cli quantized --verify (server on cuda:0)"
cli quantized --format nvfp4 --weight_only --dtype float16 --m 1 --n 8192 --k 8192 --verify
cli quantized --format nvfp4 --weight_only --dtype float16 --m 16 --n 8192 --k 8192 --verify
cli quantized --format int8 --weight_only --m 16 --n 8192 --k 8192 --verify
cli quantized --format int8 --weight_only --dtype bfloat16 --m 16 --n 8192 --k 8192 --verify
cli quantized --format nvfp4 --m 4096 --n 4096 --k 4096 --verify
cli quantized --format int8 --m 4096 --n 4096 --k 4096 --verify
echo "### end to end, M=16 N=K=8192: QuantizedMatmul NVFP4 weight-only vs Matmul FP16"
cli bench --quantized --format nvfp4 --weight_only --dtype float16 --m 16 --n 8192 --k 8192 \
  --concurrency 4 --duration_s "$duration" --warmup_s 1
cli bench --dtype float16 --precision fp16_tensor --transpose_b --m 16 --n 8192 --k 8192 \
  --concurrency 4 --duration_s "$duration" --warmup_s 1

# The first request after start with lazy (CUDA's default) and eager module loading: the
# time to a healthy server and the first skinny request's compute phase.
echo "### first request after start: --cuda_module_loading=lazy vs eager"
for mode in lazy eager; do
  kill -TERM $server 2>/dev/null
  wait $server 2>/dev/null
  start=$(date +%s%N)
  "$bin/gemm-server" --backend=cuda --devices=0 --port "$port" --metrics_port -1 \
    --cuda_module_loading=$mode >/tmp/gpu_quantized_server_$mode.log 2>&1 &
  server=$!
  for _ in $(seq 300); do
    "$bin/gemm-cli" health --target "127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.05
  done
  echo "$mode: healthy $(( ($(date +%s%N) - start) / 1000000 )) ms after launch"
  for call in 1 2; do
    echo "$mode call $call:"
    cli quantized --format nvfp4 --weight_only --dtype float16 --m 1 --n 8192 --k 8192
  done
done
