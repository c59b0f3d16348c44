"""Writes a generated section into a file of docs/ through
benchmarks/doc_sections.py, stamped (Note [A generated section carries its
stamp]), for the tools: they run it rather than import it from another
folder."""

import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit():
    """The commit a section runs on (benchmarks/doc_sections.py's commit())."""
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "doc_sections.py"), "commit"],
        check=True,
        text=True,
        stdout=subprocess.PIPE,
    ).stdout.strip()


def write_section(path, marker, section, header="", whole=False):
    """Puts `section` (from <!-- marker --> to <!-- /marker -->) into `path`
    in place of an earlier one, or appends it; a new file starts with
    `header`. With `whole`, `path` holds that section alone."""
    with tempfile.NamedTemporaryFile("w", suffix=".md") as header_file:
        header_file.write(header)
        header_file.flush()
        subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, "benchmarks", "doc_sections.py"),
                "write",
                path,
                marker,
                "--header",
                header_file.name,
                *(["--whole"] if whole else []),
            ],
            input=section,
            text=True,
            check=True,
        )
