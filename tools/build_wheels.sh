#!/usr/bin/env bash
# Builds one wheel per torch release, each against that release.
#
#   bash tools/build_wheels.sh [--check] RELEASE ...
#   bash tools/build_wheels.sh [--check] --python PYTHON
#
# For each release: the cached venv with that torch from PyPI (the one
# tools/torch_matrix.py uses, kept), then `pip wheel --no-build-isolation` of
# a copy of the sources into wheelhouse/torch-RELEASE/. With --python, one
# wheel for that interpreter's torch. Each wheel requires exactly its torch
# and carries a local version tag naming it (Note [A wheel names the one torch
# it was built for] in setup.py), so pip refuses it next to another release.
# --check then installs the wheel from that folder into the release's venv,
# runs `python -m autograd_device_logging --check` there and uninstalls it.
# Prints one line per wheel; exits non-zero if any build or check failed.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wheelhouse=${AUTOGRAD_DEVICE_LOGGING_WHEELHOUSE:-$repo/wheelhouse}
check=0
pythons=()
releases=()
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --python)
      [ $# -ge 2 ] || { echo "build_wheels.sh: --python needs an interpreter" >&2; exit 2; }
      pythons+=("$2"); shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "build_wheels.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) releases+=("$1") ;;
  esac
  shift
done
if [ ${#pythons[@]} -eq 0 ] && [ ${#releases[@]} -eq 0 ]; then
  echo "build_wheels.sh: name a torch release or --python (see --help)" >&2
  exit 2
fi
for release in "${releases[@]}"; do
  venv=$(python3 "$repo/tools/torch_matrix.py" --venv "$release") ||
    { echo "torch $release: no venv (see above)"; exit 1; }
  pythons+=("$venv/bin/python")
done

# The sources pip builds from: tracked and untracked files that git does not
# ignore, copied, since pip and setuptools write build/ and *.egg-info into
# the project they build.
source=$(mktemp -d)
trap 'rm -rf "$source"' EXIT
(cd "$repo" && git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$source")

status=0
for python in "${pythons[@]}"; do
  report=""
  release=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])') ||
    { echo "$python: cannot import torch"; status=1; continue; }
  out="$wheelhouse/torch-$release"
  mkdir -p "$out"
  rm -f "$out"/autograd_device_logging-*.whl
  if ! "$python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
    -w "$out" "$source" >&2; then
    echo "torch $release: wheel FAILED"
    status=1
    continue
  fi
  wheel=$(ls "$out"/autograd_device_logging-*.whl)
  line="torch $release: ${wheel#"$repo"/}"
  if [ "$check" = 1 ]; then
    if "$python" -m pip install -q --disable-pip-version-check --no-index \
      --find-links "$out" autograd_device_logging >&2 &&
      report=$(cd / && "$python" -m autograd_device_logging --check); then
      line+=" | --check: $(echo "$report" | grep -E '^active:' | tr -s ' ')"
    else
      line+=" | --check FAILED"
      status=1
    fi
    [ -n "$report" ] && echo "$report" >&2
    "$python" -m pip uninstall -q -y autograd_device_logging >&2
  fi
  echo "$line"
done
exit $status
