#!/usr/bin/env bash
# The BLAS offload benchmark: one unmodified BLAS program (blas-offload-bench, linked to
# the system's libblas.so.3) timed as it is, on the host's BLAS with all its cores, and
# under LD_PRELOAD=libgemmd_blas.so with every call sent to a gemm-server on this host,
# square sizes from small to large, FP64 and FP32, in one run. The table at the end gives
# the speed-up and the smallest size where remote beats local (what GEMMD_BLAS_MIN_FLOPS'
# default should be).
#
#   bench/blas_offload.sh BIN [BACKEND]
# BIN: a build tree or a flat folder with gemm-server, gemm-cli, blas-offload-bench and
# libgemmd_blas.so; BACKEND: cuda (default) or cpu. Environment: SIZES (default
# "256 512 1024 2048 4096"), REPS (5), DTYPES ("d s"), OUT_DIR, PORT, LOCAL_ENV
# (VAR=VALUE words for the local runs only, e.g. OPENBLAS_CORETYPE=SkylakeX where
# OpenBLAS does not recognise the CPU and falls back to its generic kernels: the line
# "local BLAS" says which it runs).
set -euo pipefail
bin=${1:?usage: blas_offload.sh BIN [BACKEND]}
backend=${2:-cuda}
sizes=${SIZES:-256 512 1024 2048 4096}
reps=${REPS:-5}
dtypes=${DTYPES:-d s}
out=${OUT_DIR:-$(mktemp -d /tmp/blas_offload.XXXXXX)}
port=${PORT:-50611}
target=127.0.0.1:$port
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/server_control.sh"
trap bench_stop EXIT

library=
for p in "$bin/libgemmd_blas.so" "$bin/client/blas/libgemmd_blas.so"; do
  [ -f "$p" ] && { library=$(cd "$(dirname "$p")" && pwd)/$(basename "$p"); break; }
done
[ -n "$library" ] || { echo "missing libgemmd_blas.so under $bin" >&2; exit 1; }
program=$(bench_exe blas-offload-bench)

local_env=${LOCAL_ENV:-}
openblas=$(ldd "$program" | awk '/libopenblas/ {print $3}' | head -1)
core=
if [ -n "$openblas" ]; then
  # shellcheck disable=SC2086
  core=$(env $local_env python3 -c "import ctypes as c; l = c.CDLL('$openblas'); \
l.openblas_get_corename.restype = c.c_char_p; \
print(l.openblas_get_corename().decode(), l.openblas_get_num_threads(), 'threads')" \
    2>/dev/null || true)
fi
echo "host: $(nproc) cores; local BLAS: $(ldd "$program" | awk '/libblas|openblas/ {print $3}' | xargs)" \
  "${core:+(OpenBLAS core $core)}${local_env:+ with $local_env}"
bench_start server "$(bench_exe gemm-server)" --host 127.0.0.1 --port "$port" \
  --metrics_port -1 --backend "$backend"

for d in $dtypes; do
  # shellcheck disable=SC2086
  env $local_env "$program" --dtype "$d" --reps "$reps" $sizes | tee "$out/local_$d.txt"
  # shellcheck disable=SC2086
  GEMMD_TARGET=$target GEMMD_BLAS_MIN_FLOPS=0 LD_PRELOAD=$library \
    "$program" --dtype "$d" --reps "$reps" $sizes | tee "$out/remote_$d.txt"
done
bench_stop

/usr/bin/env python3 - "$out" $dtypes <<'PY'
import re, sys
out, dtypes = sys.argv[1], sys.argv[2:]
def rows(path):
    r = {}
    for line in open(path):
        f = dict(kv.split("=") for kv in line.split()[1:])
        r[int(f["n"])] = f
    return r
print(f"\n{'routine':8} {'n':>6} {'local ms':>10} {'remote ms':>10} {'speed-up':>9} "
      f"{'local GF/s':>11} {'remote GF/s':>12} {'remote err':>11}")
for d in dtypes:
    local, remote = rows(f"{out}/local_{d}.txt"), rows(f"{out}/remote_{d}.txt")
    crossing = None
    for n in sorted(local):
        l, r = float(local[n]["median_s"]), float(remote[n]["median_s"])
        if crossing is None and r < l:
            crossing = n
        print(f"{d + 'gemm':8} {n:>6} {l * 1e3:>10.2f} {r * 1e3:>10.2f} {l / r:>8.2f}x "
              f"{float(local[n]['gflops']):>11.1f} {float(remote[n]['gflops']):>12.1f} "
              f"{remote[n]['max_rel_error']:>11}")
    print(f"{d}gemm: remote beats local from n = {crossing} "
          f"({2 * crossing ** 3:.3g} flops)" if crossing else f"{d}gemm: local wins at every size")
PY
