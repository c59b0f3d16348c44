#!/usr/bin/env bash
# GPU verification: on a machine with NVIDIA GPUs, builds the library against
# that machine's installed torch (the torch of $PYTHON, default python3, not
# the CI pin), runs the whole suite (C++ and Python, CUDA cases included) and
# the demo, and prints pass/fail counts and the events each demo scenario
# produced.
#
#   bash tools/gpu_check.sh [--record FILE]
#
# --parity-only builds only what the upstream-parity replay needs and runs only
# test/test_upstream_parity.py (the recorded corpus on the test accelerator
# and on cuda:0/cuda:1); with --record it has its own section.
# --wheel-only builds and installs only the wheel, as a user would with this
# machine's default compiler ($CXX), and runs what its first step runs too:
# the library's exported symbols, then `import numpy; import torch` and a
# pytest file that imports torch, in a fresh venv whose .pth activates the
# library (Note [One C++ runtime per process]); with --record it has its own
# section.
# --record FILE writes this run's section (date, torch version, GPUs, command,
# counts, events) into FILE, replacing an earlier section for the same number
# of GPUs. docs/gpu-verification.md is made this way.
# Needs: cmake, a C++17 compiler, GoogleTest (libgtest-dev or
# /usr/src/googletest), and pytest and expecttest importable by $PYTHON.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
record=""
parity_only=0
wheel_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --record) record=${2:?--record needs a file}; shift 2 ;;
    --parity-only) parity_only=1; shift ;;
    --wheel-only) wheel_only=1; shift ;;
    *) echo "usage: bash tools/gpu_check.sh [--record FILE] [--parity-only | --wheel-only]" >&2; exit 2 ;;
  esac
done
build=${AUTOGRAD_DEVICE_LOGGING_BUILD_DIR:-$repo/build-gpu}
export AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=$build
work=$(mktemp -d)

torch_version=$("$python" -c 'import torch; print(torch.__version__)')
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
gpu_names=$("$python" -c 'import collections, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; print("; ".join(f"{c} x {name}" for name, c in collections.Counter(torch.cuda.get_device_name(i) for i in range(n)).items()))')
echo "== torch $torch_version, $gpus CUDA device(s): ${gpu_names:-none}"

# Puts section file $2, delimited by <!-- $1 --> ... <!-- /$1 -->, into
# $record, stamped, replacing an earlier one with the same marker
# (Note [A generated section carries its stamp], benchmarks/doc_sections.py).
replace_section() {
  local header="$work/header.md"
  printf '%s\n\n%s\n\n' "# GPU verification" \
    "Written by \`tools/gpu_check.sh --record\`, one section per GPU count, from the script's own output on a machine with NVIDIA GPUs." > "$header"
  "$python" "$repo/benchmarks/doc_sections.py" write "$record" "$1" --header "$header" < "$2"
}
commit=$("$python" "$repo/benchmarks/doc_sections.py" commit)

if [ $parity_only = 1 ]; then
  if ! AUTOGRAD_DEVICE_LOGGING_TARGETS="autograd_device_logging_library autograd_device_logging_python autograd_test_accelerator" \
      bash "$repo/tools/build.sh" "$python" > "$work/build.log" 2>&1; then
    tail -50 "$work/build.log"; echo "build failed"; exit 1
  fi
  echo "== upstream-parity replay (pytest test/test_upstream_parity.py)"
  "$python" -m pytest -q -rA -p no:cacheprovider "$repo/test/test_upstream_parity.py" > "$work/pytest.log" 2>&1
  pytest_rc=$?
  grep -E "^(PASSED|SKIPPED|FAILED|ERROR)" "$work/pytest.log"
  summary=$(grep -E "[0-9]+ (passed|failed)" "$work/pytest.log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
  echo "$summary"
  scenarios=$("$python" -c "import json; print(len(json.load(open('$repo/test/fixtures/upstream_backward_events.json'))['scenarios']))")
  if [ -n "$record" ]; then
    section="$work/section.md"
    {
      echo "<!-- gpu-check-parity: $gpus GPU -->"
      echo "## Upstream-parity replay, $gpus GPU(s): ${gpu_names:-none}"
      echo
      echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit"
      echo "- torch: $torch_version, python: $("$python" -c 'import sys; print(sys.version.split()[0])')"
      echo "- command: \`bash tools/gpu_check.sh --parity-only --record docs/gpu-verification.md\`"
      echo "- corpus: $scenarios scenarios of \`test/fixtures/upstream_backward_events.json\`, each test requiring all of them to give torch 2.14.1's and 2.15.0's own events"
      echo "- pytest: $summary"
      echo
      echo '```'
      grep -E "^(PASSED|SKIPPED|FAILED|ERROR)" "$work/pytest.log"
      echo '```'
      echo "<!-- /gpu-check-parity: $gpus GPU -->"
    } > "$section"
    replace_section "gpu-check-parity: $gpus GPU" "$section"
    echo "recorded in $record"
  fi
  exit $pytest_rc
fi

# The wheel as a user builds and installs it: pip, the default compiler, a
# venv that sees this machine's torch, the .pth active. Sets wheel_rc and
# the wheel_* lines the record holds.
check_installed_wheel() {
  local src="$work/wheel-source" venv="$work/wheel-venv" lib
  mkdir -p "$src"
  tar -C "$repo" --exclude=./.git --exclude='./build*' --exclude='*.egg-info' -cf - . | tar -C "$src" -xf -
  wheel_compiler="$(basename "${CXX:-c++}") ($("${CXX:-c++}" --version | head -1))"
  echo "== wheel: pip wheel --no-build-isolation with $wheel_compiler"
  wheel_rc=1
  if ! "$python" -m pip wheel -q --no-build-isolation --no-deps -w "$work/dist" "$src" > "$work/wheel.log" 2>&1; then
    tail -30 "$work/wheel.log"; wheel_summary="pip wheel failed"; return
  fi
  "$python" -m venv "$venv" && "$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/installed_torch.pth"
  "$venv/bin/python" -m pip install -q --no-deps "$work"/dist/*.whl || { wheel_summary="pip install failed"; return; }
  lib=$(ls "$venv"/lib/python*/site-packages/autograd_device_logging/libautograd_device_logging.so)
  wheel_exports=$(nm -DC --defined-only "$lib" | wc -l)
  wheel_needs=$(objdump -p "$lib" | awk '/NEEDED/ { print $2 }' | tr '\n' ' ')
  echo "exported symbols: $wheel_exports; needs: $wheel_needs"
  nm -DC --defined-only "$lib" | awk '{ $1 = ""; $2 = ""; print substr($0, 3) }' > "$work/wheel-exports.txt"
  cat "$work/wheel-exports.txt"
  echo "== import numpy; import torch, torch.ao.quantization (the .pth active)"
  "$venv/bin/python" -c 'import numpy; import torch, torch.ao.quantization, sys
x = torch.ones(2, requires_grad=True)
(x * 2).sum().backward()
s = sys.modules["autograd_device_logging"].status()
assert s.active and not s.disabled_reason and s.activated_by == "on torch import", s
print("import and backward: ok,", s.activated_by)' > "$work/import.log" 2>&1
  local import_rc=$?
  cat "$work/import.log"
  import_line="import numpy; import torch: exit $import_rc ($(tail -1 "$work/import.log"))"
  printf 'import torch\n\ndef test_backward():\n    x = torch.ones(2, requires_grad=True)\n    (x * 2).sum().backward()\n    assert x.grad.tolist() == [2.0, 2.0]\n' > "$work/test_imports_torch.py"
  echo "== pytest on a file that imports torch (plugins: $("$venv/bin/python" -m pytest --version 2>&1 | tail -1))"
  (cd "$work" && "$venv/bin/python" -m pytest -q -p no:cacheprovider test_imports_torch.py) > "$work/pytest-one.log" 2>&1
  local pytest_one_rc=$?
  tail -3 "$work/pytest-one.log"
  pytest_one_line="pytest on a file that imports torch: exit $pytest_one_rc ($(grep -E "passed|failed|error" "$work/pytest-one.log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//'))"
  wheel_summary="$wheel_exports exported symbols; needs $wheel_needs"
  [ $import_rc -eq 0 ] && [ $pytest_one_rc -eq 0 ] && wheel_rc=0
}

if [ $wheel_only = 1 ]; then
  check_installed_wheel
  if [ -n "$record" ]; then
    section="$work/section.md"
    {
      echo "<!-- gpu-check-wheel: $gpus GPU -->"
      echo "## The installed wheel, $gpus GPU(s): ${gpu_names:-none}"
      echo
      echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit"
      echo "- torch: $torch_version, python: $("$python" -c 'import sys; print(sys.version.split()[0])')"
      echo "- compiler: $wheel_compiler, the machine's default"
      echo "- command: \`bash tools/gpu_check.sh --wheel-only --record docs/gpu-verification.md\`"
      echo "- library: $wheel_summary"
      echo "- ${import_line:-import not run}"
      echo "- ${pytest_one_line:-pytest not run}"
      echo
      echo "Exported symbols (\`nm -DC --defined-only\`):"
      echo
      echo '```'
      cat "$work/wheel-exports.txt" 2>/dev/null
      echo '```'
      echo "<!-- /gpu-check-wheel: $gpus GPU -->"
    } > "$section"
    replace_section "gpu-check-wheel: $gpus GPU" "$section"
    echo "recorded in $record"
  fi
  exit $wheel_rc
fi

if ! bash "$repo/tools/build.sh" "$python" > "$work/build.log" 2>&1; then
  tail -50 "$work/build.log"; echo "build failed"; exit 1
fi

check_installed_wheel

echo "== C++ tests (ctest)"
(cd "$build" && ctest --output-on-failure --parallel "$(nproc)") > "$work/ctest.log" 2>&1
ctest_rc=$?
grep -E "tests passed|\(Failed\)|\(Skipped\)|Subprocess" "$work/ctest.log"
ctest_total=$(grep -oE "out of [0-9]+" "$work/ctest.log" | tail -1 | grep -oE "[0-9]+")
ctest_failed=$(grep -oE "[0-9]+ tests failed" "$work/ctest.log" | tail -1 | grep -oE "^[0-9]+")
grep -q "100% tests passed" "$work/ctest.log" && ctest_failed=${ctest_failed:-0}
ctest_skipped=$(grep -cE "\(Skipped\)" "$work/ctest.log")
ctest_passed=$(( ${ctest_total:-0} - ${ctest_failed:-0} - ctest_skipped ))

echo "== Python tests (pytest)"
# What the suite imports beyond torch (requirements.txt pins each): pytest;
# expecttest, which torch.testing._internal (the tests' TestCase) needs; and
# hypothesis, jsonschema and duckdb, which the record's tests use. A GPU
# machine's Python may come without them. Name each missing module and its
# pin rather than let pytest fail on a collection error.
missing=$("$python" - <<'PY'
import importlib
missing = []
for module in (
    "pytest",
    "expecttest",
    "hypothesis",
    "jsonschema",
    "duckdb",
    "torch.testing._internal.common_utils",
):
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing.append(e.name or module)
print(" ".join(dict.fromkeys(missing)))
PY
)
if [ -n "$missing" ]; then
  pins=$(for module in $missing; do
    grep -E "^${module}==" "$repo/requirements.txt" || echo "$module"
  done | tr '\n' ' ' | sed 's/ $//')
  pytest_summary="not run: missing Python module(s): $missing; install with: $python -m pip install $pins"
  echo "$pytest_summary"
  echo "(without network: pip download --no-deps $pins elsewhere, copy the wheels over, and pip install them)"
  pytest_rc=1
else
  "$python" -m pytest -q -rA -p no:cacheprovider "$repo/test" > "$work/pytest.log" 2>&1
  pytest_rc=$?
  grep -E "^(SKIPPED|FAILED|ERROR)|passed|failed" "$work/pytest.log" | tail -40
  sed -n '/warnings summary/,/-- Docs/p' "$work/pytest.log" | head -20
  pytest_summary=$(grep -E "[0-9]+ (passed|failed)" "$work/pytest.log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
fi

# The recorded differential replayed on cuda:0 and cuda:1 (its test requires
# every scenario to agree with torch's own events; it needs 2 GPUs).
scenarios=$("$python" -c "import json; print(len(json.load(open('$repo/test/fixtures/upstream_backward_events.json'))['scenarios']))")
parity=$(grep -oE "^(PASSED|FAILED|SKIPPED).*test_replay_on_cuda_agrees_with_upstream.*" "$work/pytest.log" 2>/dev/null | head -1)
[ -n "$parity" ] || parity=$(grep -oE "^SKIPPED.*test_upstream_parity.py.*" "$work/pytest.log" 2>/dev/null | head -1)
parity_line="upstream-parity replay on cuda:0/cuda:1, $scenarios recorded scenarios: ${parity:-not run}"
echo "$parity_line"

echo "== Demo (events per scenario)"
"$python" "$repo/demo/run_demo.py" --build "$build" > "$work/demo.log" 2>&1
demo_rc=$?
cat "$work/demo.log"

echo "== Summary"
echo "C++: ${ctest_passed} passed, ${ctest_failed:-?} failed, ${ctest_skipped} skipped (of ${ctest_total:-?})"
echo "Python: ${pytest_summary:-no summary}"
echo "demo: exit $demo_rc"
echo "wheel: $wheel_summary; ${import_line:-}; ${pytest_one_line:-}"

if [ -n "$record" ]; then
  section="$work/section.md"
  {
    echo "<!-- gpu-check: $gpus GPU -->"
    echo "## $gpus GPU(s): ${gpu_names:-none}"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit"
    echo "- torch: $torch_version (the machine's installed torch, built against by this run)"
    echo "- CUDA_VISIBLE_DEVICES: ${CUDA_VISIBLE_DEVICES:-unset}"
    echo "- PYTEST_ADDOPTS: ${PYTEST_ADDOPTS:-unset}"
    echo "- python: $("$python" -c 'import sys; print(sys.version.split()[0])'), compiler: $(c++ --version | head -1)"
    echo "- command: \`bash tools/gpu_check.sh --record docs/gpu-verification.md\`"
    echo "- C++ (ctest, one process per case): ${ctest_passed} passed, ${ctest_failed:-?} failed, ${ctest_skipped} skipped, of ${ctest_total:-?}"
    echo "- Python (pytest): ${pytest_summary:-no summary}"
    echo "- $parity_line (PASSED means all of them gave torch 2.14.1's and 2.15.0's own events)"
    echo "- the wheel, built by pip with $wheel_compiler and installed in a fresh venv (the .pth active): $wheel_summary; ${import_line:-import not run}; ${pytest_one_line:-pytest not run}"
    echo
    echo "Skipped cases and reasons:"
    echo
    echo '```'
    { grep -E "\(Skipped\)" "$work/ctest.log"; grep -sE "^SKIPPED" "$work/pytest.log"; } | sed 's/^ *//' || true
    echo '```'
    echo
    echo "Events per demo scenario (\`PYTORCH_API_USAGE_STDERR=1\`, grepped from each scenario's stderr):"
    echo
    echo '```'
    cat "$work/demo.log"
    echo '```'
    echo "<!-- /gpu-check: $gpus GPU -->"
  } > "$section"
  replace_section "gpu-check: $gpus GPU" "$section"
  echo "recorded in $record"
fi
[ $ctest_rc -eq 0 ] && [ $pytest_rc -eq 0 ] && [ $demo_rc -eq 0 ] && [ $wheel_rc -eq 0 ]
