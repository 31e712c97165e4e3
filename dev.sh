#!/usr/bin/env bash
# gemmd's one entry point on a Debian 12 machine: installs what is missing (apt-get, as
# root or through sudo), builds, and then runs the server or the tests.
#
#   ./dev.sh run [gemm-server flags]   install, build, start gemm-server (default backend)
#   ./dev.sh test                      install, build, run every test (ctest)
#   ./dev.sh build                     install and build only
#   ./dev.sh deps                      install only
#
# Build directory: build/ (override with BUILD_DIR). Extra CMake flags: CMAKE_ARGS, e.g.
# CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90". CUDA kernels are built when nvcc is found
# (/usr/local/cuda); everything else works without it.
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build}
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libopenblas-dev libssl-dev openssl
  libgtest-dev libgmock-dev
  clang-14 libclang-rt-14-dev
  python3-grpcio python3-numpy python3-protobuf iperf3
  # The Python client installed as a package (pip install clients/python, in a venv).
  python3-pip python3-venv python3-setuptools python3-wheel
  # The reference BLAS testers (xblat3d, xdcblat3, ...) that check libgemmd_blas.so, and
  # the gfortran runtime they run on.
  libblas-test libgfortran5
  # Deployment tests (tests/deploy): images, Prometheus in the loop, compose file.
  docker.io mmdebstrap prometheus docker-compose python3-yaml
)
# The Kubernetes manifests' validator runs on Node.js with packages from npm: Debian's
# nodejs and npm, unless a Node.js with npm is installed already (NodeSource's nodejs
# package carries its own npm and conflicts with Debian's).
command -v npm >/dev/null || PACKAGES+=(nodejs npm)

deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dev.sh: installing ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "dev.sh: need root (or sudo) to install packages" >&2; exit 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
}

build() {
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}

case "${1:-}" in
  deps) deps ;;
  build) deps; build ;;
  run) deps; build; shift; exec "$BUILD_DIR/server/gemm-server" "$@" ;;
  test) deps; build; tests/run_ctest.sh ctest "$BUILD_DIR" --output-on-failure -j "$(nproc)" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
