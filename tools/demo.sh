#!/usr/bin/env bash
# The main job: sets up the pinned venv, builds what the demo runs (the
# library, its Python package and the two-device test accelerator; not the
# tests or benchmarks), and runs the demo backward passes, printing the
# events each produced.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${1:-}
if [ -z "$python" ]; then
  python="$(bash "$repo/tools/setup_env.sh")/bin/python"
fi
build=$(AUTOGRAD_DEVICE_LOGGING_TARGETS="autograd_device_logging_library autograd_device_logging_python autograd_test_accelerator" \
  bash "$repo/tools/build.sh" "$python")
# The demo imports test/autograd_test_accelerator.py: no bytecode cache there.
PYTHONDONTWRITEBYTECODE=1 exec "$python" "$repo/demo/run_demo.py" --build "$build"
