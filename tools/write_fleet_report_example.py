"""Writes the fleet-report example in docs/usage.md and docs/fleet-report.png.

    python tools/write_fleet_report_example.py [--build build]
        [--also PYTHON BUILD ...]

Run it with the pinned venv's Python (it has matplotlib). It runs the demo's
scenarios with a shared record directory (demo/run_demo.py --report DIR
--measure-threading: a job per scenario, statistics and the threading-cost
measurement on), once with this Python and the build in
--build and once more for each --also pair (another torch release's Python
and a build against it, e.g. tools/torch_matrix.py --keep's), then
`python -m autograd_device_logging report DIR --plot docs/fleet-report.png`,
and puts the table, with the date, machine and torch releases, between the
fleet-report markers of docs/usage.md.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

import generated_docs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "fleet-report-example"
BEGIN = f"<!-- {MARKER} -->"
END = f"<!-- /{MARKER} -->"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument(
        "--also",
        nargs=2,
        action="append",
        default=[],
        metavar=("PYTHON", "BUILD"),
        help="run the demo again with this Python and a build against its torch",
    )
    args = parser.parse_args()
    runs = [(sys.executable, os.path.abspath(args.build))]
    runs += [(python, os.path.abspath(build)) for python, build in args.also]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.path.join(runs[0][1], "python")
    releases = []
    with tempfile.TemporaryDirectory() as records:
        for python, build in runs:
            releases.append(
                subprocess.run(
                    [python, "-c", "import torch; print(torch.__version__)"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.strip()
            )
            demo = subprocess.run(
                [
                    python,
                    os.path.join(REPO, "demo", "run_demo.py"),
                    "--build",
                    build,
                    "--report",
                    records,
                    "--measure-threading",
                ],
                env=dict(env, PYTHONPATH=os.path.join(build, "python")),
                capture_output=True,
                text=True,
            )
            print(demo.stdout)
            if demo.returncode != 0:
                sys.exit(f"the demo failed with {python}:\n{demo.stderr}")
        # Pairs per process, from the records the demo wrote.
        pairs = set()
        for name in os.listdir(records):
            if name.endswith(".json"):
                with open(os.path.join(records, name)) as f:
                    cost = json.load(f).get("threading_cost") or {}
                pairs.add(sum(len(p) for p in cost.get("pairs", {}).values()))
        per_process = str(min(pairs)) if len(pairs) == 1 else f"{min(pairs)} to {max(pairs)}"
        png = os.path.join(REPO, "docs", "fleet-report.png")
        report = subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "report", records, "--plot", png],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    block = "\n".join(
        [
            BEGIN,
            f"`python tools/write_fleet_report_example.py"
            + "".join(" --also PYTHON BUILD" for _ in args.also)
            + "` on "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, commit "
            f"{generated_docs.commit()} "
            f"({platform.machine()}, torch {' and '.join(releases)}): the demo's scenarios, "
            "each a job of training steps with the threading-cost measurement on (`run_demo.py "
            f"--measure-threading`: {per_process} pairs per process, an "
            "illustration of the table rather than "
            "a measurement), on the test accelerator, once per torch release, with one shared "
            "record directory:",
            "",
            "```",
            report.rstrip("\n"),
            "```",
            "",
            "![The share of processes with each event per torch release; passes per class "
            "per job](fleet-report.png)",
            END,
        ]
    )
    usage = os.path.join(REPO, "docs", "usage.md")
    with open(usage) as f:
        if BEGIN not in f.read():
            sys.exit(f"docs/usage.md has no {BEGIN} ... {END} section")
    generated_docs.write_section(usage, MARKER, block)
    print(report)
    print(f"wrote {png} and the example in docs/usage.md")


if __name__ == "__main__":
    main()
