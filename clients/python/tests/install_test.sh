#!/bin/bash
# The gemmd package as a user installs it: its wheel built by pip (stubs generated inside
# it, setup.py) and installed into a fresh virtual environment that sees the system's
# grpcio, protobuf and numpy, with no package index; then the package's tests run against
# that installed copy, from outside the source tree.
#
#   clients/python/tests/install_test.sh PYTHON GEMM_SERVER GEMM_CLI
#
# The sources are copied first (clients/python and proto/, as laid out in the
# repository, and the test certificates' script the security tests run), so pip's
# in-place build leaves nothing in the checkout.
set -euo pipefail
py=${1:?usage: install_test.sh PYTHON GEMM_SERVER GEMM_CLI}
server=$(readlink -f "${2:?usage: install_test.sh PYTHON GEMM_SERVER GEMM_CLI}")
cli=$(readlink -f "${3:?usage: install_test.sh PYTHON GEMM_SERVER GEMM_CLI}")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d /tmp/gemmd_install_test.XXXXXX)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/src/clients"
cp -r "$repo/clients/python" "$work/src/clients/python"
cp -r "$repo/proto" "$work/src/proto"
mkdir -p "$work/src/tests"
cp -r "$repo/tests/security" "$work/src/tests/security"
rm -rf "$work/src/clients/python/gemmd/_proto" "$work/src/clients/python/build"
"$py" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --no-build-isolation --no-index --quiet "$work/src/clients/python"
"$work/venv/bin/pip" show gemmd | grep -E '^(Name|Version|Location):'
cd "$work"
"$work/venv/bin/python" "$work/src/clients/python/tests/test_client.py" --installed \
  --server "$server" --cli "$cli"
