#!/usr/bin/env bash
# Configures and builds the library and its tests against a torch.
#
#   bash tools/build.sh [PYTHON]
#
# PYTHON is the interpreter whose torch to build against (default: the
# pinned venv from tools/setup_env.sh). The build goes to
# $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR (default: build/); extra CMake arguments
# come from $AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS. $AUTOGRAD_DEVICE_LOGGING_TARGETS
# (space-separated) builds only those targets instead of everything.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${1:-}
if [ -z "$python" ]; then
  python="$(bash "$repo/tools/setup_env.sh")/bin/python"
fi
build=${AUTOGRAD_DEVICE_LOGGING_BUILD_DIR:-$repo/build}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ -f "$build/CMakeCache.txt" ] && ! grep -qE "^Python3_EXECUTABLE:[A-Z]+=$python\$" "$build/CMakeCache.txt"; then
  rm -rf "$build"  # another torch: start clean
fi
read -r -a extra <<< "${AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS:-}"
cmake -S "$repo" -B "$build" "${generator[@]}" -DPython3_EXECUTABLE="$python" "${extra[@]}" >&2
read -r -a targets <<< "${AUTOGRAD_DEVICE_LOGGING_TARGETS:-}"
cmake --build "$build" --parallel "$(nproc)" ${targets[@]:+--target "${targets[@]}"} >&2
echo "$build"
