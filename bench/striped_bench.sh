#!/usr/bin/env bash
# The pieces of a striped call, timed apart (docs/BENCHMARKS.md, "Striped calls"): one
# gemm-server, then
#   - PutTensor and GetTensor of one call-sized operand over 1, 8 and 16 connections
#     (gemm-cli put / get --connections), each twice;
#   - one big Matmul over 1 connection and striped over 8 (gemm-cli matmul --stripes,
#     --verify), each twice, printing the server's Timing and the client's round trip.
# The rates under load are transport_bench.sh's big_c1 / big_striped* cases.
# Usage: bench/striped_bench.sh BIN_DIR [cpu|cuda]   (BIN_DIR holds gemm-server, gemm-cli)
#   cuda: a [4096, 8192] FP16 operand (64 MiB) and a 4096^3 FP16 -> FP32 Matmul.
#   cpu: a [4096, 4096] FP32 operand (64 MiB) and the transport-bound 4096x1x4096 FP32 one.
set -uo pipefail
bin=${1:?usage: striped_bench.sh BIN_DIR [cpu|cuda]}
mode=${2:-cpu}
port=${PORT:-50792}
target=127.0.0.1:$port
out=$(mktemp -d)
py=
for candidate in python3 /usr/bin/python3; do  # one with numpy (it writes the .npy file)
  "$candidate" -c "import numpy" 2>/dev/null && { py=$candidate; break; }
done
[ -n "$py" ] || { echo "striped_bench.sh: no python3 with numpy" >&2; exit 1; }
"$bin/gemm-server" --backend="$mode" --port "$port" --metrics_port -1 >"$out/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 100); do
  "$bin/gemm-cli" health --target "$target" >/dev/null 2>&1 && break
  sleep 0.1
done
echo "## $(date -u +%Y-%m-%dT%H:%MZ) $mode, $(nproc) cores"
if [ "$mode" = cuda ]; then
  "$py" -c "import numpy as np; np.save('$out/x.npy', np.random.rand(4096, 8192).astype(np.float16))"
  call=(--m 4096 --n 4096 --k 4096 --dtype float16 --precision fp16_tensor)
else
  "$py" -c "import numpy as np; np.save('$out/x.npy', np.random.rand(4096, 4096).astype(np.float32))"
  call=(--m 4096 --n 1 --k 4096)
fi
for connections in 1 8 16 1 8 16; do
  handle=$("$bin/gemm-cli" put "$out/x.npy" --connections "$connections" --target "$target" \
    2>"$out/put.err") || { cat "$out/put.err"; exit 1; }
  tail -1 "$out/put.err"
  "$bin/gemm-cli" get "$handle" --out "$out/y.npy" --connections "$connections" \
    --target "$target" 2>&1 >/dev/null | tail -1
  "$bin/gemm-cli" rm "$handle" --target "$target" >/dev/null
done
for stripes in 1 8 1 8; do
  echo "--stripes $stripes:"
  "$bin/gemm-cli" matmul "${call[@]}" --stripes "$stripes" --verify --target "$target" 2>&1 |
    grep -E "server_us|client:|rel_error"
done
