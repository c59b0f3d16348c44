#!/usr/bin/env bash
# Sanitized builds of the library and its tests, against the pinned torch
# (libtorch itself is not instrumented).
#
#   bash tools/run_sanitizers.sh address   # ASan+UBSan: every C++ test case
#   bash tools/run_sanitizers.sh thread    # TSan: the concurrency test cases
#
# Each builds into build-<sanitizer>/ (or $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR)
# and fails on the first report: sanitizer reports abort the test process.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sanitizer=${1:-}
case "$sanitizer" in
  address | thread) ;;
  *) echo "usage: $0 address|thread" >&2; exit 2 ;;
esac
venv=$(bash "$repo/tools/setup_env.sh")
export AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=${AUTOGRAD_DEVICE_LOGGING_BUILD_DIR:-$repo/build-$sanitizer}
export AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS="-DAUTOGRAD_DEVICE_LOGGING_SANITIZER=$sanitizer"
build=$(bash "$repo/tools/build.sh" "$venv/bin/python")

cd "$build"
if [ "$sanitizer" = address ]; then
  # LeakSanitizer stays on: the tests' processes exit normally.
  export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_init_order=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LSAN_OPTIONS=suppressions=$repo/test/sanitizers/lsan.supp
  ctest --output-on-failure --parallel "$(nproc)"
else
  # The cases in which many threads run backward passes at once.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$repo/test/sanitizers/tsan.supp"
  ctest --output-on-failure --parallel "$(nproc)" \
    -R 'SixteenThreads|Concurrent'
fi
