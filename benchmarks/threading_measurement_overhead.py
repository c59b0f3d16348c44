"""What the threading-cost measurement costs the passes it does not sample.

    python3 benchmarks/threading_measurement_overhead.py [--passes N] [--output docs/performance.md]

(run with any Python 3; it sets up and builds what it needs through tools/).
Times `loss.backward()` of a 10-node CPU chain and of a 10-node graph on the
test accelerator, with the library loaded, in --rounds fresh processes per
setting, the settings interleaved (Note [Reading wall times] in
benchmarks/run_benchmarks.py):

  off          AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING unset: nothing wrapped
  on, unsampled  the measurement on at rate 0: every pass goes through the
               wrapper, which counts it and draws whether to sample it
  on, finished the measurement on after its pairs were measured: the
               wrapper's first check sends every pass straight to torch

Each process gives its median per pass; the section gives, per setting, the
median over the processes with their range, and its difference from `off`,
between the threading-measurement-overhead markers of the output file.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

import doc_sections

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "threading-measurement-overhead"
SETTINGS = {
    "off": {},
    "on, unsampled": {
        "AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING": "1",
        "AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE": "0",
    },
    "on, finished": {
        "AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING": "1",
        "AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE": "1",
        "AUTOGRAD_DEVICE_LOGGING_MEASURE_WARMUP": "0",
        "AUTOGRAD_DEVICE_LOGGING_MEASURE_PAIRS": "1",
    },
}
CHILD = """
import json, sys, time
import autograd_device_logging
import torch
import importlib.util
spec = importlib.util.spec_from_file_location("autograd_test_accelerator", {accelerator!r})
autograd_test_accelerator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(autograd_test_accelerator)
d0, d1 = autograd_test_accelerator.load()
graphs = {{
    "10-node CPU chain": torch.ones(4, requires_grad=True),
    "10-node graph on the test accelerator": torch.ones(4).to(d0).requires_grad_(),
}}
out = {{}}
for name, leaf in graphs.items():
    def run():
        x = leaf
        for _ in range(9):
            x = x * 1.0001
        t = time.perf_counter_ns()
        x.sum().backward()
        return time.perf_counter_ns() - t
    for _ in range(200):
        run()
    out[name] = sorted(run() for _ in range({passes}))
    leaf.grad = None
print(json.dumps(out))
"""


def build():
    venv = subprocess.run(
        ["bash", os.path.join(REPO, "tools", "setup_env.sh")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    python = os.path.join(venv, "bin", "python")
    build_dir = subprocess.run(
        ["bash", os.path.join(REPO, "tools", "build.sh"), python],
        env=dict(
            os.environ,
            AUTOGRAD_DEVICE_LOGGING_TARGETS="autograd_device_logging_library "
            "autograd_device_logging_python autograd_test_accelerator",
        ),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return python, build_dir


def run_setting(python, build_dir, code, extra):
    """One fresh process of a setting: its median per pass and graph, in
    microseconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRAD_DEVICE_LOGGING")}
    env.update(
        extra,
        PYTHONPATH=os.path.join(build_dir, "python"),
        AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=build_dir,
        PYTHONDONTWRITEBYTECODE="1",
        OMP_NUM_THREADS="1",
    )
    out = subprocess.run(
        [python, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout
    times = json.loads(out.strip().splitlines()[-1])
    return {name: statistics.median(t) / 1e3 for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--passes", type=int, default=5000, help="timed passes per process and graph"
    )
    parser.add_argument("--rounds", type=int, default=6, help="processes per setting")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "performance.md"))
    args = parser.parse_args()
    python, build_dir = build()
    code = CHILD.format(
        accelerator=os.path.join(REPO, "test", "autograd_test_accelerator.py"), passes=args.passes
    )
    medians = {setting: {} for setting in SETTINGS}
    settings = list(SETTINGS.items())
    for r in range(args.rounds):
        for setting, extra in settings[r % len(settings) :] + settings[: r % len(settings)]:
            for name, value in run_setting(python, build_dir, code, extra).items():
                medians[setting].setdefault(name, []).append(value)
    version = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    lines = [
        f"<!-- {MARKER} -->",
        "## The threading-cost measurement's cost on passes it does not sample",
        "",
        "Written by `python3 benchmarks/threading_measurement_overhead.py --passes "
        f"{args.passes} --rounds {args.rounds}` "
        f"on {datetime.date.today().isoformat()}, commit {doc_sections.commit()}: "
        f"{platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch {version}. Wall time of `loss.backward()` per pass "
        f"(microseconds): each of {args.rounds} fresh processes per setting, interleaved, gives "
        "its median; a cell is the median over the processes with their range, and the "
        "difference from `off` (Note [Reading wall times] in `benchmarks/run_benchmarks.py`).",
        "",
        "| graph | off | on, unsampled | on, finished |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in medians["off"]:
        values = {s: medians[s][name] for s in SETTINGS}
        base = statistics.median(values["off"])

        def cell(v):
            return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"

        cells = [cell(values["off"])] + [
            f"{cell(values[s])}, {statistics.median(values[s]) - base:+.2f}"
            for s in ("on, unsampled", "on, finished")
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [f"<!-- /{MARKER} -->", ""]
    section = "\n".join(lines)
    doc_sections.replace_section(args.output, MARKER, section)
    print(section)


if __name__ == "__main__":
    sys.exit(main())
