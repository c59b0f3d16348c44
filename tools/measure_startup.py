"""Measures what the import hook costs a process that never imports torch.

    python tools/measure_startup.py [--runs 300] [--output docs/startup.md]

Run it with the pinned venv's Python (tools/setup_env.sh). It builds the
wheel from a copy of the sources, makes two fresh venvs that see this
interpreter's torch (as the tests do), installs the wheel into one of them,
and times `python -c pass` in both, interleaved, --runs times each. Writes
the medians, their ratio (target: at most 1.05) and the spread to --output.
"""

import argparse
import datetime
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

import generated_docs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_wheel(wheelhouse):
    """The wheel tools/build_wheels.sh builds for this interpreter's torch."""
    subprocess.run(
        ["bash", os.path.join(REPO, "tools", "build_wheels.sh"), "--python", sys.executable],
        env=dict(os.environ, AUTOGRAD_DEVICE_LOGGING_WHEELHOUSE=wheelhouse),
        check=True,
    )
    (wheel,) = glob.glob(os.path.join(wheelhouse, "*", "autograd_device_logging-*.whl"))
    return wheel


def fresh_venv(path):
    """A new venv that sees this interpreter's torch through a .pth file, as
    a venv made with that torch would; (python, site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    python = os.path.join(path, "bin", "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        text=True,
        stdout=subprocess.PIPE,
    ).stdout.strip()
    with open(os.path.join(site, "installed_torch.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


def time_once(python):
    start = time.perf_counter()
    subprocess.run([python, "-c", "pass"], check=True)
    return (time.perf_counter() - start) * 1000.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "startup.md"))
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="adl-startup-")
    try:
        wheel = build_wheel(os.path.join(tmp, "wheelhouse"))
        with_hook, site = fresh_venv(os.path.join(tmp, "with"))
        subprocess.run([with_hook, "-m", "pip", "install", "-q", "--no-deps", wheel], check=True)
        assert os.path.exists(os.path.join(site, "autograd_device_logging.pth"))
        without, _ = fresh_venv(os.path.join(tmp, "without"))
        for python in (with_hook, without):  # warm the page cache
            for _ in range(5):
                time_once(python)
        times = {"with": [], "without": []}
        for i in range(args.runs):
            order = (("with", with_hook), ("without", without))
            for name, python in order if i % 2 == 0 else reversed(order):
                times[name].append(time_once(python))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def q(values, fraction):
        return sorted(values)[int(fraction * (len(values) - 1))]

    # The verdict follows from the figures as written: the medians rounded to
    # the table's 0.01 ms, and their ratio to four places.
    med = {k: round(statistics.median(v), 2) for k, v in times.items()}
    ratio = round(med["with"] / med["without"], 4)
    lines = [
        "# Interpreter start-up with the import hook",
        "",
        f"Written by `python tools/measure_startup.py --runs {args.runs}` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, commit "
        f"{generated_docs.commit()} "
        f"({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}).",
        "",
        "`python -c pass` in two fresh venvs that see the same torch, one with the "
        "wheel installed (so site runs `autograd_device_logging.pth`, which installs "
        f"the import hook) and one without; {args.runs} runs each, interleaved, "
        "wall time of the whole process.",
        "",
        "| venv | median ms | 10th-90th percentile ms |",
        "| --- | ---: | ---: |",
    ]
    for name in ("without", "with"):
        lines.append(
            f"| {name} the package | {med[name]:.2f} | "
            f"{q(times[name], 0.1):.2f}-{q(times[name], 0.9):.2f} |"
        )
    lines += [
        "",
        f"Ratio of medians, with / without: {med['with']:.2f} / {med['without']:.2f} = {ratio:.4f} "
        f"({med['with'] - med['without']:+.2f} ms); target at most 1.05: "
        + ("met" if ratio <= 1.05 else "MISSED")
        + ".",
        "",
    ]
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    generated_docs.write_section(
        args.output,
        "startup",
        "\n".join(["<!-- startup -->", *lines, "<!-- /startup -->"]),
        whole=True,
    )
    print("\n".join(lines))
    return 0 if ratio <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
