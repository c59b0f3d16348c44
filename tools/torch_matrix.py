"""Builds and tests the project against each torch release, one at a time.

    python3 tools/torch_matrix.py [--keep] [RELEASE ...]
    python3 tools/torch_matrix.py --venv RELEASE    # prints that release's venv

For each release (default: the newest patch of every 2.x minor line on PyPI):
a cached venv with that torch (tools/setup_env.sh), a build of the library,
its tests and the test accelerator against it (build-torch-RELEASE/), ctest,
pytest, the demo, and that release's wheel (tools/build_wheels.sh --check).
It writes a row per release into the torch-matrix section of
docs/torch-versions.md: build ok, C++ and Python passed/skipped/failed, the
demo's events, the wheel's --check, and seconds. A release not run in
this invocation keeps the row an earlier run wrote. Each venv holds several
GB of CUDA wheels, so the ones this run made are removed unless --keep.
"""

import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import generated_docs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASES = [
    "2.0.1",
    "2.1.2",
    "2.2.2",
    "2.3.1",
    "2.4.1",
    "2.5.1",
    "2.6.0",
    "2.7.1",
    "2.8.0",
    "2.9.1",
    "2.10.0",
    "2.11.0",
    "2.12.1",
    "2.13.0",
    "2.14.1",
    "2.15.0",
]
MARKER = "torch-matrix"
HEADER = (
    "| torch | run (commit, date) | build | C++ passed / skipped / failed | Python passed / skipped / failed "
    "| demo events | wheel: --check | seconds |"
)


def numpy_for(release):
    """Wheels before torch 2.3 were built against numpy 1.x."""
    major, minor = (int(p) for p in release.split(".")[:2])
    return "numpy==1.26.4" if (major, minor) < (2, 3) else "numpy==2.2.6"


def venv_for(release, log):
    with tempfile.TemporaryDirectory() as tmp:
        requirements = os.path.join(tmp, f"requirements-torch-{release}.txt")
        with open(requirements, "w") as f:
            f.write(
                f"torch=={release}\n{numpy_for(release)}\npytest==8.3.5\nexpecttest==0.3.0\n"
                "matplotlib==3.9.4\nsetuptools>=70.1\n"
                "hypothesis==6.122.3\njsonschema==4.23.0\nduckdb==1.1.3\nscipy==1.14.1\n"
                "msgspec==0.19.0\ntqdm==4.67.1\npytest-xdist==3.6.1\n"
                "prometheus-client==0.26.0\nopentelemetry-sdk==1.45.2\n"
                "opentelemetry-exporter-otlp-proto-http==1.45.2\nopentelemetry-proto==1.45.2\n"
            )
        env = dict(os.environ, AUTOGRAD_DEVICE_LOGGING_REQUIREMENTS=requirements)
        existed = set(os.listdir(cache_dir())) if os.path.isdir(cache_dir()) else set()
        out = subprocess.run(
            ["bash", os.path.join(REPO, "tools", "setup_env.sh")],
            env=env,
            capture_output=True,
            text=True,
        )
    log.write(out.stderr)
    if out.returncode != 0:
        return None, False
    venv = out.stdout.strip()
    return venv, os.path.basename(venv) not in existed


def cache_dir():
    return os.environ.get("AUTOGRAD_DEVICE_LOGGING_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "autograd_device_logging",
    )


def counts(pattern_text, text, names):
    found = {name: 0 for name in names}
    for number, name in re.findall(pattern_text, text):
        if name in found:
            found[name] = int(number)
    return found


def run_release(release, keep, log):
    start = time.monotonic()
    row = {"torch": release}
    venv, made = venv_for(release, log)
    if venv is None:
        row.update(build="venv failed (see log)", cpp="-", python="-", demo="-", wheel="-")
        return row, time.monotonic() - start
    python = os.path.join(venv, "bin", "python")
    build = os.path.join(REPO, f"build-torch-{release}")
    env = dict(os.environ, AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=build, PYTHONDONTWRITEBYTECODE="1")
    try:
        built = subprocess.run(
            ["bash", os.path.join(REPO, "tools", "build.sh"), python],
            env=env,
            capture_output=True,
            text=True,
        )
        log.write(built.stderr)
        if built.returncode != 0:
            error = next(
                (line for line in built.stderr.splitlines() if "error" in line),
                "see log",
            )
            row.update(
                build="FAILED: " + error.strip()[:160], cpp="-", python="-", demo="-", wheel="-"
            )
            return row, time.monotonic() - start
        row["build"] = "ok"
        ctest = subprocess.run(
            ["ctest", "--parallel", str(os.cpu_count() or 1)],
            cwd=build,
            env=env,
            capture_output=True,
            text=True,
        )
        log.write(ctest.stdout)
        total = re.search(r"tests passed, (\d+) tests failed out of (\d+)", ctest.stdout)
        skipped = len(re.findall(r"\*\*\*Skipped|Not Run \(Disabled\)", ctest.stdout))
        if total:
            failed, all_ = int(total.group(1)), int(total.group(2))
            row["cpp"] = f"{all_ - failed - skipped} / {skipped} / {failed}"
        else:
            row["cpp"] = "did not run (see log)"
        pytest = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(REPO, "test")],
            env=env,
            capture_output=True,
            text=True,
        )
        log.write(pytest.stdout[-20000:])
        c = counts(
            r"(\d+) (passed|skipped|failed|error)",
            pytest.stdout,
            ("passed", "skipped", "failed", "error"),
        )
        row["python"] = f"{c['passed']} / {c['skipped']} / {c['failed'] + c['error']}"
        demo = subprocess.run(
            [python, os.path.join(REPO, "demo", "run_demo.py"), "--build", build],
            env=env,
            capture_output=True,
            text=True,
        )
        log.write(demo.stdout + demo.stderr)
        events = sorted(
            set(
                re.findall(
                    r"\b(multidevice_backward|gpu_cpu_backward)\b",
                    demo.stdout + demo.stderr,
                )
            )
        )
        row["demo"] = (", ".join(events) or "none") if demo.returncode == 0 else "FAILED (see log)"
        wheel = subprocess.run(
            ["bash", os.path.join(REPO, "tools", "build_wheels.sh"), "--check", "--python", python],
            env=env,
            capture_output=True,
            text=True,
        )
        log.write(wheel.stdout + wheel.stderr)
        checked = re.search(r"--check: (active: .*)", wheel.stdout)
        row["wheel"] = checked.group(1) if wheel.returncode == 0 and checked else "FAILED (see log)"
    finally:
        if made and not keep:
            shutil.rmtree(venv, ignore_errors=True)
    return row, time.monotonic() - start


def write(rows, output):
    text = open(output).read() if os.path.exists(output) else ""
    old = {}
    section = re.search(r"<!-- %s -->.*?<!-- /%s -->\n?" % (MARKER, MARKER), text, re.S)
    if section:
        for line in section.group(0).splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 8 and cells[0] in RELEASES:
                old[cells[0]] = line
            elif len(cells) == 7 and cells[0] in RELEASES:
                # A row from before rows named their run.
                old[cells[0]] = f"| {cells[0]} | not recorded | " + " | ".join(cells[1:]) + " |"
    for release, line in rows.items():
        old[release] = line
    lines = [
        f"<!-- {MARKER} -->",
        "## Build and test per release",
        "",
        "Written by `python3 tools/torch_matrix.py`, one row per release, each from the run "
        "that last tested it, which the row names (the commit and the date). Each row: a venv "
        "with that torch from PyPI, the library, its "
        "tests and the test accelerator built against it, then ctest, pytest (the whole "
        "Python suite), the demo, and a wheel (tools/build_wheels.sh) installed into that venv "
        "and its `--check`. From 2.14 on torch logs the events itself: the library "
        "classifies as before and leaves the logging to torch, and only the cases about what "
        "is logged without the library skip there, saying so (Note [The events' tests where "
        "torch logs them itself]).",
        "",
        HEADER,
        "| --- | --- | --- | ---: | ---: | --- | --- | ---: |",
    ]
    for release in RELEASES:
        lines.append(old.get(release, f"| {release} | not run yet | - | - | - | - | - | - |"))
    lines += [
        "",
        f"Last run: {datetime.date.today()} on {platform.machine()}, Python {platform.python_version()}.",
        f"<!-- /{MARKER} -->",
        "",
    ]
    generated_docs.write_section(output, MARKER, "\n".join(lines), "# Torch releases\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("releases", nargs="*", default=RELEASES)
    parser.add_argument("--keep", action="store_true", help="keep the venvs this run made")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "torch-versions.md"))
    parser.add_argument("--log", default=os.path.join(tempfile.gettempdir(), "torch_matrix.log"))
    parser.add_argument(
        "--venv",
        action="store_true",
        help="only make (or find) the cached venv of the one release given and print its path",
    )
    args = parser.parse_args()
    unknown = [r for r in args.releases if r not in RELEASES]
    if unknown:
        parser.error(f"not a release this matrix covers: {', '.join(unknown)}")
    if args.venv:
        if len(args.releases) != 1 or args.releases == RELEASES:
            parser.error("--venv takes exactly one release")
        venv, _ = venv_for(args.releases[0], sys.stderr)
        if venv is None:
            return 1
        print(venv)
        return 0
    rows = {}
    ran_on = f"{generated_docs.commit()}, {datetime.date.today()}"
    with open(args.log, "a") as log:
        for release in args.releases:
            print(f"== torch {release}", flush=True)
            row, seconds = run_release(release, args.keep, log)
            line = (
                f"| {row['torch']} | {ran_on} | {row['build']} | {row['cpp']} | {row['python']} "
                f"| {row['demo']} | {row['wheel']} | {seconds:,.0f} |"
            )
            print(line, flush=True)
            rows[release] = line
            write(rows, args.output)
    print(f"written to {args.output}; log in {args.log}")


if __name__ == "__main__":
    sys.exit(main())
