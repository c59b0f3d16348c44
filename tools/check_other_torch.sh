#!/usr/bin/env bash
# Installs the package into a venv with another torch release and checks it
# there (the CI pin is requirements.txt's; this covers users' other torches):
#
#   bash tools/check_other_torch.sh 2.12.1
#
# 1. a venv with torch==VERSION (cached like the main one);
# 2. pip install --no-build-isolation . into it: built against that torch;
# 3. python -m autograd_device_logging --check there: active, versions match;
# 4. the library built for the CI pin (build/) loaded into a process running
#    that torch (torch imported first, so the process keeps its own libtorch,
#    as after an in-place torch upgrade): it must refuse, naming both
#    versions, and leave backward unchanged.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${1:?usage: check_other_torch.sh TORCH_VERSION}
reqs=$(mktemp -d)/requirements-torch-$version.txt
printf 'torch==%s\nnumpy==2.2.6\n# builds the package with --no-build-isolation\nsetuptools>=70.1\n' "$version" > "$reqs"
venv=$(AUTOGRAD_DEVICE_LOGGING_REQUIREMENTS=$reqs bash "$repo/tools/setup_env.sh")
python="$venv/bin/python"
work=$(mktemp -d)
cd "$work"

echo "== pip install --no-build-isolation . (torch $version)"
# From a copy without build outputs: pip builds a local project in place, and
# nothing here writes into the checkout.
mkdir source
tar -C "$repo" --exclude=./.git --exclude='./build*' --exclude='*.egg-info' \
  --exclude=__pycache__ -cf - . | tar -C source -xf -
"$python" -m pip install -q --no-build-isolation --no-deps --force-reinstall ./source
echo "== --check"
"$python" -m autograd_device_logging --check

# Step 4 imports torch first: without the installed package (whose import
# hook would load the library ahead of torch), from the pinned build's copy.
"$python" -m pip uninstall -q -y autograd_device_logging
pinned_lib="$repo/build/python/autograd_device_logging/libautograd_device_logging.so"
if [ -f "$pinned_lib" ]; then
  echo "== the CI pin's build loaded into torch $version"
  PYTHONPATH="$repo/build/python" "$python" -W ignore::RuntimeWarning -c '
import torch
import autograd_device_logging as adl
x = torch.arange(1.0, 4.0, requires_grad=True)
(x * x).sum().backward()
assert torch.equal(x.grad, 2 * torch.arange(1.0, 4.0)), x.grad
s = adl.status()
print("disabled:", s.disabled_reason)
assert s.disabled_reason and s.built_for_torch in s.disabled_reason and s.running_torch in s.disabled_reason
print("backward unchanged: yes")
'
fi
echo "== torch $version: OK"
