#!/usr/bin/env bash
# Runs every test: sets up the pinned venv, builds, checks the Python
# formatting (black, isort), then runs the C++ tests
# (ctest, one process per test case) and the Python tests (pytest, over one
# process per core with pytest-xdist), both again on an ASan+UBSan build, and
# the concurrent cases on a TSan build (tools/run_sanitizers.sh address, then
# thread). Then the oldest supported torch release (2.0.1, its cached venv
# from tools/torch_matrix.py --venv, made in the background from the start):
# build, ctest and the Python suites that
# run torch (those that read only source or records are the same on every
# release), no sanitizers, so that the oldest code paths cannot rot. Last, it
# checks that the run wrote nothing into the checkout but its build folders
# (build/, build-address/, build-thread/, build-oldest/).
#
#   bash tools/run_tests.sh [PYTHON]
#
# PYTHON selects another interpreter and its torch.
# AUTOGRAD_DEVICE_LOGGING_SKIP_SANITIZERS=1 leaves out the sanitized runs,
# AUTOGRAD_DEVICE_LOGGING_SKIP_OLDEST=1 the oldest release.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# No bytecode caches next to the sources, in this script's Python processes
# and in every child they start.
export PYTHONDONTWRITEBYTECODE=1

# What git sees in the checkout (tracked changes, untracked and ignored files),
# less the build folders this script makes. Empty output outside a checkout.
tree_state() {
  git -C "$repo" status --porcelain --ignored=matching --untracked-files=all 2>/dev/null |
    grep -vE '^!! build(-address|-thread|-oldest)?/$' || true
}
tree_before=$(tree_state)
status=0

# A section's header says how long the run had taken when it began.
section() { printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

python=${1:-}
if [ -z "$python" ]; then
  venv=$(bash "$repo/tools/setup_env.sh") || exit 1
  python="$venv/bin/python"
fi
# The oldest release's venv is made (on a fresh machine: downloaded, about
# 3 minutes) in the background while the builds and tests below run on the
# CPUs; its section waits for it.
oldest=2.0.1
if [ "${AUTOGRAD_DEVICE_LOGGING_SKIP_OLDEST:-0}" != 1 ]; then
  oldest_setup=$(mktemp -d)
  trap 'rm -rf "$oldest_setup"' EXIT
  python3 "$repo/tools/torch_matrix.py" --venv "$oldest" \
    >"$oldest_setup/venv" 2>"$oldest_setup/log" &
  oldest_setup_pid=$!
fi
build=$(bash "$repo/tools/build.sh" "$python") || { echo "build failed"; exit 1; }

# The telemetry's tests run the real tools (test/test_prometheus.py):
# node_exporter and promtool, from Debian's packages, installed when missing.
if ! command -v prometheus-node-exporter >/dev/null || ! command -v promtool >/dev/null; then
  section "Installing node_exporter and promtool (Debian: prometheus-node-exporter, prometheus)"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  apt_install() {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
      prometheus-node-exporter prometheus >/dev/null
  }
  apt_install || { $sudo apt-get update -q >/dev/null && apt_install; } ||
    { echo "could not install node_exporter and promtool"; status=1; }
fi

# The tests in parallel: one process per core, at most 8; a test class stays
# in one process, so that what its setUpClass builds is built once, and the
# classes that pip-build the sources share one (Note [One pip build per test
# run] in test/conftest.py).
workers=$(nproc)
[ "$workers" -gt 8 ] && workers=8
export PYTEST_ADDOPTS="-n $workers --dist loadgroup ${PYTEST_ADDOPTS:-}"

section "Python formatting (black, isort; configured in pyproject.toml)"
mapfile -t python_sources < <(git -C "$repo" ls-files '*.py' | sed "s|^|$repo/|")
if [ ${#python_sources[@]} -eq 0 ]; then
  python_sources=("$repo")  # not a git checkout: everything below the repo
fi
(cd "$repo" && "$python" -m black --check --quiet "${python_sources[@]}" &&
  "$python" -m isort --check-only --quiet "${python_sources[@]}") ||
  { echo "Python sources are not formatted: run black and isort (pyproject.toml)"; status=1; }
section "C++ tests (ctest)"
(cd "$build" && ctest --output-on-failure --parallel "$(nproc)") || status=1
section "Python tests (pytest)"
AUTOGRAD_DEVICE_LOGGING_BUILD_DIR="$build" "$python" -m pytest -q -rs -p no:cacheprovider "$repo/test" || status=1
if [ "${AUTOGRAD_DEVICE_LOGGING_SKIP_SANITIZERS:-0}" != 1 ]; then
  for sanitizer in address thread; do
    section "$sanitizer sanitizer build"
    AUTOGRAD_DEVICE_LOGGING_BUILD_DIR= bash "$repo/tools/run_sanitizers.sh" "$sanitizer" "$python" || status=1
  done
fi

if [ "${AUTOGRAD_DEVICE_LOGGING_SKIP_OLDEST:-0}" != 1 ]; then
  section "torch $oldest, the oldest supported release: build, C++ and Python tests"
  wait "$oldest_setup_pid"
  oldest_setup_status=$?
  cat "$oldest_setup/log" >&2
  if [ "$oldest_setup_status" = 0 ] && old_venv=$(cat "$oldest_setup/venv") &&
    old_build=$(AUTOGRAD_DEVICE_LOGGING_BUILD_DIR="$repo/build-oldest" \
      AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS=-DAUTOGRAD_DEVICE_LOGGING_BUILD_BENCHMARKS=OFF \
      bash "$repo/tools/build.sh" "$old_venv/bin/python"); then
    (cd "$old_build" && ctest --output-on-failure --parallel "$(nproc)") || status=1
    # Left out: the suites that read only source or records, which no torch
    # release changes, and the corpus replayed in a fresh process per
    # scenario: here the reused-process replay gives every scenario of it
    # the same check against the recorded answers at a tenth of the cost; the
    # pinned release above checks each mode against them.
    AUTOGRAD_DEVICE_LOGGING_BUILD_DIR="$old_build" "$old_venv/bin/python" -m pytest -q -rs \
      -p no:cacheprovider "$repo/test" \
      -k "not test_replay_on_the_test_accelerator_agrees_with_upstream" \
      --ignore="$repo/test/test_benchmark_verdicts.py" \
      --ignore="$repo/test/test_cost_statistics.py" \
      --ignore="$repo/test/test_fleet_report_reader.py" \
      --ignore="$repo/test/test_package_structure.py" || status=1
  else
    echo "torch $oldest: venv or build failed"
    status=1
  fi
fi

section "The checkout is as the tests found it"
if ! git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  echo "not a git checkout: not checked"
elif [ "$(tree_state)" != "$tree_before" ]; then
  echo "the tests changed the checkout (git status, build folders left out):"
  diff <(printf '%s\n' "$tree_before") <(printf '%s\n' "$(tree_state)") | grep '^[<>]'
  status=1
else
  echo "unchanged: $(printf '%s' "$tree_before" | grep -c . || true) entries before and after, none new"
fi
section "done: exit status $status"
exit $status
