#!/usr/bin/env bash
# The main job: sets up the pinned venv, builds the library, and runs the demo
# backward passes, printing the events each produced.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${1:-}
if [ -z "$python" ]; then
  python="$(bash "$repo/tools/setup_env.sh")/bin/python"
fi
build=$(bash "$repo/tools/build.sh" "$python")
exec "$python" "$repo/demo/run_demo.py" --build "$build"
