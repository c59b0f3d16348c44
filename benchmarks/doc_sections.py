"""What the GPU and overhead benchmarks share: building the library against
the running torch, and writing a marked section into a file of docs/."""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_library(default_dir: str, cmake_args: str) -> str:
    """Builds the library and its Python package against this interpreter's
    torch into $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR (default `default_dir`
    under the repo); returns the directory to put on PYTHONPATH."""
    build = os.environ.get("AUTOGRAD_DEVICE_LOGGING_BUILD_DIR", os.path.join(REPO, default_dir))
    env = dict(
        os.environ,
        AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=build,
        AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS=cmake_args,
        AUTOGRAD_DEVICE_LOGGING_TARGETS="autograd_device_logging_library autograd_device_logging_python",
    )
    subprocess.run(
        ["bash", os.path.join(REPO, "tools", "build.sh"), sys.executable],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return os.path.join(build, "python")


def commit() -> str:
    """The checkout's commit, short, and whether tracked files differ from
    it: what a generated section says it ran on."""
    out = subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (out.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty else "")


def replace_section(path: str, marker: str, section: str, header: str = "") -> None:
    """Puts `section` (which starts with <!-- marker --> and ends with
    <!-- /marker -->) into `path` in place of an earlier one, or appends it;
    a new file starts with `header`."""
    text = open(path).read() if os.path.exists(path) else header
    pattern = re.compile(r"<!-- %s -->.*?<!-- /%s -->\n?" % (marker, marker), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section if text else section
    with open(path, "w") as f:
        f.write(text)
