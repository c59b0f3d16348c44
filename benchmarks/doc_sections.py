"""What the scripts that write docs/ share: building the library against
the running torch, the commit a figure ran on, and writing a generated
section, stamped, into a file of docs/.

    python3 benchmarks/doc_sections.py write PATH MARKER [--header FILE] < SECTION

writes SECTION (from <!-- MARKER --> to <!-- /MARKER -->) into PATH, for
the scripts that do not import this module (tools/generated_docs.py, and
tools/gpu_check.sh).
"""

import argparse
import hashlib
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
    """The checkout's commit, short, and whether tracked files outside docs/
    differ from it: what a generated section says it ran on (the sections
    already written into docs/ change nothing that runs).
    $AUTOGRAD_DEVICE_LOGGING_COMMIT names it instead, for a copy of the
    working tree whose git metadata is not the tree's (a run on another
    machine over a copy of the checkout)."""
    if os.environ.get("AUTOGRAD_DEVICE_LOGGING_COMMIT"):
        return os.environ["AUTOGRAD_DEVICE_LOGGING_COMMIT"]
    out = subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (out.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty else "")


# Note [A generated section carries its stamp]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every figure in docs/ comes from a script, into a section between
# <!-- NAME --> and <!-- /NAME -->. Its last line before the closing marker
# is a stamp: the first 16 hex digits of the SHA-256 of the lines between
# the opening marker and the stamp. replace_section() writes it;
# test/test_docs.py recomputes every stamp in docs/, so a section edited by
# hand fails the tests until its script writes it again. A stamp is a check
# against slips, not a signature: the way to change a section is to re-run
# its script.
STAMP_PREFIX = "<!-- sha256 "
STAMP_SUFFIX = ": written by a script; re-run it rather than edit this section -->"
_OPENING = re.compile(r"^<!-- (?!/)(?!sha256 )(.+?) -->$")


def stamp_of(body: str) -> str:
    """The stamp line of a section's `body` (its lines between the markers,
    less the stamp)."""
    return STAMP_PREFIX + hashlib.sha256(body.encode()).hexdigest()[:16] + STAMP_SUFFIX


def stamped(section: str) -> str:
    """`section`, from its opening marker to its closing one, with its stamp
    (Note [A generated section carries its stamp]) in place of any earlier
    one."""
    lines = section.rstrip("\n").split("\n")
    body = [line for line in lines[1:-1] if not line.startswith(STAMP_PREFIX)]
    text = "\n".join(body) + "\n"
    return "\n".join([lines[0], *body, stamp_of(text), lines[-1]]) + "\n"


def sections(text: str):
    """(marker, body, stamp line or None) of each marked section of `text`."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = _OPENING.match(lines[i])
        if opening:
            closing = "<!-- /%s -->" % opening.group(1)
            try:
                end = lines.index(closing, i + 1)
            except ValueError:
                i += 1
                continue
            inner = lines[i + 1 : end]
            stamp = inner[-1] if inner and inner[-1].startswith(STAMP_PREFIX) else None
            body = inner[:-1] if stamp else inner
            yield opening.group(1), "\n".join(body) + "\n", stamp
            i = end
        i += 1


def stamp_problems(text: str):
    """What is wrong with the stamps of `text`'s sections: one line per
    section without a stamp or whose stamp does not match it."""
    out = []
    for marker, body, stamp in sections(text):
        if stamp is None:
            out.append(f"{marker}: no stamp")
        elif stamp != stamp_of(body):
            out.append(f"{marker}: edited after its script wrote it")
    return out


def replace_section(path: str, marker: str, section: str, header: str = "") -> None:
    """Puts `section` (which starts with <!-- marker --> and ends with
    <!-- /marker -->), stamped, into `path` in place of an earlier one, or
    appends it; a new file starts with `header`."""
    section = stamped(section)
    text = open(path).read() if os.path.exists(path) else header
    pattern = re.compile(
        r"<!-- %s -->.*?<!-- /%s -->\n?" % (re.escape(marker), re.escape(marker)), re.S
    )
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section if text else section
    with open(path, "w") as f:
        f.write(text)


def write_whole(path: str, section: str, kept: str = "") -> None:
    """Writes `path` anew: `section`, stamped, then `kept` (sections of other
    scripts, already stamped, kept as they were)."""
    with open(path, "w") as f:
        f.write(stamped(section) + ("\n" + kept if kept else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="write the section on stdin into PATH")
    write.add_argument("path")
    write.add_argument("marker")
    write.add_argument("--header", help="a file whose text starts PATH if PATH is new")
    write.add_argument("--whole", action="store_true", help="PATH holds this section alone")
    commands.add_parser("commit", help="print the commit a section runs on (commit())")
    args = parser.parse_args()
    if args.command == "commit":
        print(commit())
        return
    header = open(args.header).read() if args.header else ""
    if args.whole:
        write_whole(args.path, sys.stdin.read())
    else:
        replace_section(args.path, args.marker, sys.stdin.read(), header)


if __name__ == "__main__":
    main()
