"""Runs each backward-pass scenario in a fresh process with autograd device
logging active, and prints the events each one produced.

    python demo/run_demo.py [--build BUILD_DIR]

Uses CUDA devices where there are enough of them, the two-device test
accelerator otherwise.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from backward_device_scenarios import SCENARIOS  # noqa: E402

NEEDS = {
    "cpu_only": 0,
    "device0_alone": 1,
    "device0_and_cpu": 1,
    "device0_and_device1": 2,
    "device0_device1_and_cpu": 2,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument(
        "--report",
        metavar="DIR",
        help="each scenario writes its process record into DIR (a job per scenario, "
        "statistics on): `python -m autograd_device_logging report DIR` then sums them up",
    )
    parser.add_argument(
        "--measure-threading",
        action="store_true",
        help="each scenario runs 40 steps with the threading-cost measurement on, sampling "
        "pairs of passes (AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING=1, at rate 1 after 4 "
        "warm-up passes, up to 8 pairs): its record, with --report, holds them",
    )
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["AUTOGRAD_DEVICE_LOGGING_BUILD_DIR"] = build
    env["PYTORCH_API_USAGE_STDERR"] = "1"
    steps = "1"
    if args.measure_threading:
        steps = "40"
        env.update(
            AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING="1",
            AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE="1",
            AUTOGRAD_DEVICE_LOGGING_MEASURE_WARMUP="4",
            AUTOGRAD_DEVICE_LOGGING_MEASURE_PAIRS="8",
        )

    print(f"torch {torch.__version__}, CUDA devices: {gpus}")
    print(f"{'scenario':<26}{'backend':<11}{'events raised':<62}result")
    failures = 0
    for name, (_, expected) in SCENARIOS.items():
        if gpus >= max(NEEDS[name], 1):
            backend = "cuda"
        elif gpus == 0:
            backend = "testaccel"
        else:
            print(f"{name:<26}{'-':<11}{'':<62}skipped: needs {NEEDS[name]} CUDA devices")
            continue
        if args.report:
            env.update(
                AUTOGRAD_DEVICE_LOGGING_REPORT_DIR=os.path.abspath(args.report),
                AUTOGRAD_DEVICE_LOGGING_JOB=name,
                AUTOGRAD_DEVICE_LOGGING_STATS="1",
            )
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "autograd_device_logging",
                os.path.join(HERE, "backward_device_scenarios.py"),
                name,
                backend,
                steps,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        events = [
            line.split()[1]
            for line in proc.stderr.splitlines()
            if line.startswith("PYTORCH_API_USAGE torch.autograd.")
            and line.split()[1].endswith(("multidevice_backward", "gpu_cpu_backward"))
        ]
        ok = proc.returncode == 0 and sorted(events) == sorted(expected)
        failures += not ok
        shown = ", ".join(e.replace("torch.autograd.", "") for e in events) or "(none)"
        print(f"{name:<26}{backend:<11}{shown:<62}{'as expected' if ok else 'UNEXPECTED'}")
        if proc.returncode != 0:
            print(proc.stderr[-2000:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
