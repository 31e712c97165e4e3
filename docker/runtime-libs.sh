#!/bin/sh
# Copies the shared libraries that the given binaries load (their ldd closure) into DEST,
# each under the name the loader asks for, so that a runtime stage needs no -dev package
# and no package names of its own distribution: only a glibc at least as new as the
# build stage's. glibc itself stays the base image's (it must match the base's loader),
# and so does libcuda: the NVIDIA container runtime mounts the host driver's.
#
#   runtime-libs.sh DEST BINARY...
set -eu
dest=$1
shift
mkdir -p "$dest"
for bin in "$@"; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  case "$name" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|\
    libresolv.so.*|libutil.so.*|libcuda.so.*|libnvidia-*) continue ;;
  esac
  cp -L "$path" "$dest/$name"
done
# A library none of the binaries can load here would fail at their first start in the
# runtime stage: say so now, while the build log is being read.
for bin in "$@"; do
  if LD_LIBRARY_PATH="$dest" ldd "$bin" | grep -q "not found"; then
    LD_LIBRARY_PATH="$dest" ldd "$bin" | grep "not found" >&2
    exit 1
  fi
done
ls "$dest"
