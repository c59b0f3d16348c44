"""Writes the README's fleet-report example and docs/fleet-report.png.

    python tools/write_fleet_report_example.py [--build build]

Run it with the pinned venv's Python (it has matplotlib). It runs the demo's
scenarios with a shared record directory (demo/run_demo.py --report DIR: a
job per scenario, statistics on), then
`python -m autograd_device_logging report DIR --plot docs/fleet-report.png`,
and puts the table, with the date and machine, between the README's
fleet-report markers.
"""

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- fleet-report-example: written by tools/write_fleet_report_example.py -->"
END = "<!-- /fleet-report-example -->"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.path.join(build, "python")
    with tempfile.TemporaryDirectory() as records:
        demo = subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, "demo", "run_demo.py"),
                "--build",
                build,
                "--report",
                records,
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        print(demo.stdout)
        if demo.returncode != 0:
            sys.exit(f"the demo failed:\n{demo.stderr}")
        png = os.path.join(REPO, "docs", "fleet-report.png")
        report = subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "report", records, "--plot", png],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    import torch

    block = "\n".join(
        [
            BEGIN,
            f"`python tools/write_fleet_report_example.py` on "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} "
            f"({platform.machine()}, torch {torch.__version__}): the demo's scenarios, "
            "each a job, on the test accelerator, with a shared record directory:",
            "",
            "```",
            report.rstrip("\n"),
            "```",
            "",
            "![Backward passes per device class, per job](docs/fleet-report.png)",
            END,
        ]
    )
    readme = os.path.join(REPO, "README.md")
    with open(readme) as f:
        text = f.read()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        sys.exit(f"README.md has no {BEGIN} ... {END} section")
    with open(readme, "w") as f:
        f.write(pattern.sub(lambda _: block, text))
    print(report)
    print(f"wrote {png} and the README's example")


if __name__ == "__main__":
    main()
