#!/usr/bin/env bash
# Regenerates every generated section of docs/ that runs on the CPU, each
# with its own script, stamped (Note [A generated section carries its stamp]
# in benchmarks/doc_sections.py), in the pinned venv:
#
#   bash tools/regenerate_docs.sh [NAME ...]
#
# NAME picks some of: performance, measurement-overhead, power, fleet-scale,
# startup, semantics, fleet-example, native-events, matrix, soak (default:
# all, in that order; matrix builds and tests 16 torch releases and soak
# repeats every suite, so those two take hours). The sections measured on
# GPUs come from their own scripts on a machine with NVIDIA GPUs:
# benchmarks/threading_cost.py, benchmarks/calling_thread.py (run twice, then
# write), benchmarks/gpu_wall_clock.py and
# tools/gpu_check.sh --record.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
all=(performance measurement-overhead power fleet-scale startup semantics fleet-example
  native-events matrix soak)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
for name in "${names[@]}"; do
  [[ " ${all[*]} " == *" $name "* ]] || { echo "regenerate_docs.sh: no section $name" >&2; exit 2; }
done

venv=$(bash "$repo/tools/setup_env.sh")
python="$venv/bin/python"
AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=$(bash "$repo/tools/build.sh" "$python")
export AUTOGRAD_DEVICE_LOGGING_BUILD_DIR
cd "$repo"
# A script that fails (a build, or a target its figures miss) is named at the
# end; the others still run.
failed=()
for name in "${names[@]}"; do
  echo "== $name"
  case "$name" in
    performance) cmd=("$python" benchmarks/run_benchmarks.py) ;;
    measurement-overhead) cmd=("$python" benchmarks/threading_measurement_overhead.py) ;;
    power) cmd=("$python" benchmarks/threading_cost.py --power) ;;
    fleet-scale) cmd=("$python" benchmarks/fleet_report_scale.py) ;;
    startup) cmd=("$python" tools/measure_startup.py --runs 600) ;;
    semantics) cmd=("$python" tools/measure_semantics.py) ;;
    fleet-example) cmd=("$python" tools/write_fleet_report_example.py) ;;
    native-events)
      cmd=("$python" tools/torch_native_events.py --write docs/torch-versions.md
        2.11.0 2.12.1 2.13.0 2.14.0 2.15.0) ;;
    matrix) cmd=("$python" tools/torch_matrix.py) ;;
    soak) cmd=("$python" tools/soak.py) ;;
  esac
  "${cmd[@]}" || failed+=("$name")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed or missed a target: ${failed[*]}"
  exit 1
fi
