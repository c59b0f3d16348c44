"""Runs the backward-scenario corpus (test/backward_scenarios.py) as a
program under another interpreter, for the tools that record and compare its
answers. The tools run it and read what it prints; they import nothing from
test/.
"""

import json
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "test", "backward_scenarios.py")
SHORT = {
    "torch.autograd.multidevice_backward": "multidevice",
    "torch.autograd.gpu_cpu_backward": "gpu_cpu",
}


def generator_version(python):
    """The corpus' GENERATOR_VERSION."""
    out = subprocess.run(
        [python, CORPUS, "--generator-version"], check=True, text=True, stdout=subprocess.PIPE
    ).stdout
    return int(out)


def run_corpus(python, build_dir, count, with_library):
    """Runs scenarios 0..count-1 with --executed under `python`, with the
    test accelerator of `build_dir`; the answers (seed, events,
    executed_events, error, code_sha256, kind), with the events by their
    short names."""
    env = dict(
        os.environ,
        AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=build_dir,
        PYTORCH_API_USAGE_STDERR="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    for name in ("LD_PRELOAD", "PYTHONPATH", "AUTOGRAD_DEVICE_LOGGING_LIBRARY"):
        env.pop(name, None)
    if with_library:
        env["PYTHONPATH"] = os.path.join(build_dir, "python")
    out = subprocess.run(
        [python, CORPUS, f"--seeds=0:{count}", "--executed"]
        + (["--with-library"] if with_library else []),
        env=env,
        check=True,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ).stdout
    answers = [json.loads(line) for line in out.splitlines()]
    for answer in answers:
        for key in ("events", "executed_events"):
            answer[key] = [SHORT[e] for e in answer[key]]
    return answers
