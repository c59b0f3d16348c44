"""Runs the suites again and again and reports every test that failed even once.

    python tools/soak.py [--ctest-rounds 10] [--python-rounds 3] [--ci-rounds 3]
                         [--output docs/soak.md]

Run it with the pinned venv's Python (tools/setup_env.sh), from a clean
checkout. It builds the plain and the ASan+UBSan trees as tools/run_tests.sh
does (build/ and build-address/), then repeats:
- the plain ctest suite and the ASan ctest suite (with LeakSanitizer, as
  tools/run_sanitizers.sh runs it), --ctest-rounds times each, interleaved;
- the Python suite (pytest over test/), --python-rounds times;
- the whole of `CI=true bash .ci/run` in a fresh clone of this checkout's
  HEAD, --ci-rounds times in a row.
Every failure is kept: which round, which test. The figures (rounds,
failures by test, durations) go to --output, with the commit they ran on, the
machine and the torch release; 0 rounds leaves a suite out. A round that
fails makes the script exit 1.
"""

import argparse
import collections
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

import generated_docs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MARKER = "soak"
ASAN_ENV = {
    "ASAN_OPTIONS": "abort_on_error=1:detect_leaks=1:strict_init_order=1",
    "LSAN_OPTIONS": "suppressions=" + os.path.join(REPO, "test", "sanitizers", "lsan.supp"),
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


class Suite:
    def __init__(self, name):
        self.name = name
        self.rounds = 0
        self.failed_rounds = 0
        self.failures = collections.Counter()
        self.seconds = []

    def add(self, seconds, failed):
        self.rounds += 1
        self.seconds.append(seconds)
        self.failed_rounds += bool(failed)
        self.failures.update(failed)


def build(build_dir, cmake_args):
    env = dict(
        os.environ,
        AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=build_dir,
        AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS=cmake_args,
    )
    subprocess.run(
        ["bash", os.path.join(REPO, "tools", "build.sh"), sys.executable],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def ctest_round(build_dir, extra_env):
    """Failed test names of one ctest run (ctest's own list of them)."""
    failed_list = os.path.join(build_dir, "Testing", "Temporary", "LastTestsFailed.log")
    if os.path.exists(failed_list):
        os.remove(failed_list)
    proc = subprocess.run(
        ["ctest", "--output-on-failure", "--parallel", str(os.cpu_count() or 1)],
        cwd=build_dir,
        env=dict(os.environ, **extra_env),
        capture_output=True,
        text=True,
    )
    failed = []
    if os.path.exists(failed_list):
        with open(failed_list) as f:
            failed = [line.strip().split(":", 1)[-1] for line in f if line.strip()]
    if proc.returncode != 0 and not failed:
        failed = ["(ctest itself: exit %d)" % proc.returncode]
    if failed:
        print(proc.stdout[-4000:], file=sys.stderr)
    return failed


def python_round(build_dir, scratch):
    """Failed test ids of one pytest run over test/ (from its JUnit XML)."""
    report = os.path.join(scratch, "pytest.xml")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", report]
        + [os.path.join(REPO, "test")],
        env=dict(
            os.environ, AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=build_dir, PYTHONDONTWRITEBYTECODE="1"
        ),
        capture_output=True,
        text=True,
    )
    failed = []
    if os.path.exists(report):
        for case in ElementTree.parse(report).iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append("%s::%s" % (case.get("classname"), case.get("name")))
        os.remove(report)
    if proc.returncode != 0 and not failed:
        failed = ["(pytest itself: exit %d)" % proc.returncode]
    if failed:
        print(proc.stdout[-4000:], file=sys.stderr)
    return failed


def ci_round(scratch, log_dir, number):
    """What failed in `CI=true bash .ci/run` on a fresh clone of HEAD: the
    sections of its log that report failures."""
    clone = os.path.join(scratch, "ci-clone")
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", REPO, clone], check=True)
    log = os.path.join(log_dir, "ci-%d.log" % number)
    with open(log, "w") as out:
        proc = subprocess.run(
            ["bash", ".ci/run"],
            cwd=clone,
            env=dict(os.environ, CI="true"),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    shutil.rmtree(clone, ignore_errors=True)
    if proc.returncode == 0:
        return []
    with open(log, errors="replace") as f:
        text = f.read()
    # pytest's failure headers (its -q summary names no test) and ctest's
    # list of failed tests, for each suite the script runs.
    # Each named with the section of the run it failed in ("== ..." lines).
    sections = [(m.start(), m.group(1)) for m in re.finditer(r"^== (.+)$", text, re.M)]

    def in_section(match):
        names = [name for start, name in sections if start < match.start()]
        return "%s (%s)" % (match.group(1), names[-1] if names else "set-up")

    patterns = (
        r"^_{3,} (\S+) _{3,}$",
        r"^\s+\d+ - (\S+) \((?:Failed|Timeout|SEGFAULT|Subprocess aborted)\)",
    )
    failed = [in_section(m) for p in patterns for m in re.finditer(p, text, re.M)]
    return failed or ["(.ci/run: exit %d, log %s)" % (proc.returncode, log)]


def torch_release():
    proc = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() or "unknown"


def section(suites, args, commit, dirty):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "<!-- %s -->" % MARKER,
        "Written by `python tools/soak.py --ctest-rounds %d --python-rounds %d --ci-rounds %d` "
        "on %s, commit `%s`%s (%s, %d cores, torch %s)."
        % (
            args.ctest_rounds,
            args.python_rounds,
            args.ci_rounds,
            when,
            commit,
            " with uncommitted changes" if dirty else "",
            platform.machine(),
            os.cpu_count() or 1,
            torch_release(),
        ),
        "",
        "| suite | rounds | rounds with a failure | median s per round | slowest s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for s in suites:
        if s.rounds == 0:
            continue
        ordered = sorted(s.seconds)
        lines.append(
            "| %s | %d | %d | %.0f | %.0f |"
            % (s.name, s.rounds, s.failed_rounds, ordered[len(ordered) // 2], ordered[-1])
        )
    lines += ["", "Tests that failed at least once:", ""]
    failures = [(s.name, test, n) for s in suites for test, n in sorted(s.failures.items())]
    if failures:
        lines += ["| suite | test | failed rounds |", "| --- | --- | ---: |"]
        lines += ["| %s | `%s` | %d |" % f for f in failures]
    else:
        lines.append("none.")
    lines.append("<!-- /%s -->" % MARKER)
    return "\n".join(lines) + "\n"


HEADER = """# Soak: the suites, run again and again

A suite that fails at random blocks every landing. `tools/soak.py` repeats
the C++ suites (plain, and under ASan with LeakSanitizer), the Python suite,
and the whole CI script on fresh clones, and lists every test that failed even
once. Note [Leaks are checked while torch's engine threads still run]
(test/cpp/api/leak_check.h) is the one flake it was written for.
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ctest-rounds", type=int, default=10)
    parser.add_argument("--python-rounds", type=int, default=3)
    parser.add_argument("--ci-rounds", type=int, default=3)
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "soak.md"))
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = bool(
        subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    plain_dir = os.path.join(REPO, "build")
    asan_dir = os.path.join(REPO, "build-address")
    plain = Suite("ctest")
    asan = Suite("ctest under ASan+UBSan")
    python = Suite("pytest")
    ci = Suite("`CI=true bash .ci/run`, fresh clone")
    scratch = tempfile.mkdtemp(prefix="adl-soak-")
    log_dir = tempfile.mkdtemp(prefix="adl-soak-logs-")
    try:
        if args.ctest_rounds or args.python_rounds:
            build(plain_dir, "")
        if args.ctest_rounds:
            build(asan_dir, "-DAUTOGRAD_DEVICE_LOGGING_SANITIZER=address")
        for i in range(args.ctest_rounds):
            for suite, directory, env in ((plain, plain_dir, {}), (asan, asan_dir, ASAN_ENV)):
                start = time.monotonic()
                failed = ctest_round(directory, env)
                suite.add(time.monotonic() - start, failed)
                print("%s round %d: %s" % (suite.name, i + 1, failed or "passed"), flush=True)
        for i in range(args.python_rounds):
            start = time.monotonic()
            failed = python_round(plain_dir, scratch)
            python.add(time.monotonic() - start, failed)
            print("pytest round %d: %s" % (i + 1, failed or "passed"), flush=True)
        for i in range(args.ci_rounds):
            start = time.monotonic()
            failed = ci_round(scratch, log_dir, i + 1)
            ci.add(time.monotonic() - start, failed)
            print("CI round %d: %s" % (i + 1, failed or "passed"), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = section((plain, asan, python, ci), args, commit, dirty)
    generated_docs.write_section(args.output, MARKER, text, HEADER)
    print(text)
    print("logs of the CI rounds:", log_dir)
    return 1 if any(s.failed_rounds for s in (plain, asan, python, ci)) else 0


if __name__ == "__main__":
    sys.exit(main())
