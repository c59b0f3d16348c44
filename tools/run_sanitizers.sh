#!/usr/bin/env bash
# Sanitized builds of the library and its tests (libtorch itself is not
# instrumented).
#
#   bash tools/run_sanitizers.sh address [PYTHON]  # ASan+UBSan: every C++ test
#                                                  # case, then the Python suite
#   bash tools/run_sanitizers.sh thread [PYTHON]   # TSan: the concurrent cases
#
# PYTHON selects the interpreter whose torch to build against (default: the
# pinned venv from tools/setup_env.sh). Each builds into build-<sanitizer>/
# (or $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR); any sanitizer report aborts the
# process it happens in, so it fails the run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sanitizer=${1:-}
case "$sanitizer" in
  address | thread) ;;
  *) echo "usage: $0 address|thread [PYTHON]" >&2; exit 2 ;;
esac
python=${2:-}
if [ -z "$python" ]; then
  python="$(bash "$repo/tools/setup_env.sh")/bin/python"
fi
export AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=${AUTOGRAD_DEVICE_LOGGING_BUILD_DIR:-$repo/build-$sanitizer}
export AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS="-DAUTOGRAD_DEVICE_LOGGING_SANITIZER=$sanitizer"
if [ "$sanitizer" = thread ]; then
  # The concurrent cases all live in the end-to-end test (and what it links):
  # building the other tests would cost minutes for cases TSan never runs.
  export AUTOGRAD_DEVICE_LOGGING_TARGETS=test_autograd_device_logging_end_to_end
fi
build=$(bash "$repo/tools/build.sh" "$python")
supp=$repo/test/sanitizers

if [ "$sanitizer" = address ]; then
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  echo "== C++ tests under ASan+UBSan (with LeakSanitizer)"
  (cd "$build" &&
    ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_init_order=1 \
    LSAN_OPTIONS=suppressions=$supp/lsan.supp \
    ctest --output-on-failure --parallel "$(nproc)")
  # The interpreter is not instrumented, so the ASan runtime is preloaded
  # into every child that loads the library (with libstdc++, whose
  # __cxa_throw ASan must find at start-up). Leak checking stays with the C++
  # run: CPython does not free everything at exit.
  echo "== Python tests under ASan+UBSan"
  cxx=${CXX:-c++}
  AUTOGRAD_DEVICE_LOGGING_TEST_PRELOAD="$("$cxx" -print-file-name=libasan.so):$("$cxx" -print-file-name=libstdc++.so.6)" \
  ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 \
    "$python" -m pytest -q -rs -p no:cacheprovider "$repo/test/test_autograd_device_logging.py"
else
  echo "== Concurrent C++ test cases under TSan"
  (cd "$build" &&
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp" \
    ctest --output-on-failure --no-tests=error --parallel "$(nproc)" \
      -R 'SixteenThreads|Concurrent')
fi
