#!/usr/bin/env bash
# Runs every test: sets up the pinned venv, builds, then runs the C++ tests
# (ctest, one process per test case) and the Python tests (pytest), both
# again on an ASan+UBSan build, and the concurrent cases on a TSan build
# (tools/run_sanitizers.sh address, then thread).
#
#   bash tools/run_tests.sh [PYTHON]
#
# PYTHON selects another interpreter and its torch.
# AUTOGRAD_DEVICE_LOGGING_SKIP_SANITIZERS=1 leaves out the sanitized runs.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${1:-}
if [ -z "$python" ]; then
  venv=$(bash "$repo/tools/setup_env.sh") || exit 1
  python="$venv/bin/python"
fi
build=$(bash "$repo/tools/build.sh" "$python") || { echo "build failed"; exit 1; }

status=0
echo "== C++ tests (ctest)"
(cd "$build" && ctest --output-on-failure --parallel "$(nproc)") || status=1
echo "== Python tests (pytest)"
AUTOGRAD_DEVICE_LOGGING_BUILD_DIR="$build" "$python" -m pytest -q -rs "$repo/test" || status=1
if [ "${AUTOGRAD_DEVICE_LOGGING_SKIP_SANITIZERS:-0}" != 1 ]; then
  for sanitizer in address thread; do
    echo "== $sanitizer sanitizer build"
    AUTOGRAD_DEVICE_LOGGING_BUILD_DIR= bash "$repo/tools/run_sanitizers.sh" "$sanitizer" "$python" || status=1
  done
fi
exit $status
