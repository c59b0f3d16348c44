"""The fleet report's options (fleet_report.py): what each takes, checked
before any record is read."""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
from typing import Optional

from .report_text import DEFAULT_WIDTH

# The most reading processes the report starts.
MAX_WORKERS = 8


def default_workers() -> int:
    """The cores this process may run on, at most MAX_WORKERS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def _when(text: str) -> str:
    """A --since/--until value as the records write times: UTC, seconds."""
    try:
        value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a date and time: {text!r} (ISO 8601: 2026-11-01, 2026-11-01T12:00:00, "
            "2026-11-01T12:00:00Z or with an offset)"
        ) from None
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value.strftime("%Y-%m-%dT%H:%M:%S")


def _plot_path(path: str) -> str:
    """--plot's value, checked before anything is read: its folder exists
    and is one, and matplotlib writes its extension."""
    folder = os.path.dirname(path) or "."
    if not os.path.exists(folder):
        raise argparse.ArgumentTypeError(f"{path}: no such folder: {folder}")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{path}: {folder} is not a folder")
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path} is a folder: name the file to write")
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    try:
        from .report_plot import supported_formats

        formats = supported_formats()
    except ImportError:
        raise argparse.ArgumentTypeError("needs matplotlib: pip install matplotlib") from None
    if extension not in formats:
        raise argparse.ArgumentTypeError(
            f"{path}: "
            + (f"matplotlib cannot write .{extension}" if extension else "no extension")
            + f" files; use one of {', '.join('.' + f for f in sorted(formats))}"
        )
    return path


def _prometheus_path(path: str) -> str:
    """--prometheus's value, checked before anything is read: a .prom file
    (all that node_exporter's textfile collector reads), its folder exists
    and is one, and prometheus_client is there to write it."""
    if not path.endswith(".prom") or os.path.basename(path).startswith("."):
        raise argparse.ArgumentTypeError(
            f"{path}: node_exporter's textfile collector reads only *.prom files "
            "(not hidden ones); name it FLEET.prom"
        )
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{path}: no such folder: {folder}")
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path} is a folder: name the file to write")
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise argparse.ArgumentTypeError(
            "needs prometheus_client: pip install prometheus-client"
        ) from None
    return path


def _not_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a whole number of 0 or more: {text!r}")
    return value


def table_width() -> int:
    """The terminal's width where stdout is one, else DEFAULT_WIDTH."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return DEFAULT_WIDTH


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line: what is wrong,
    and where help is."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (--help says more)\n")


def make_parser(prog: Optional[str] = None, description: Optional[str] = None):
    """The report's options; `description` is its help text (fleet_report's
    docstring)."""
    parser = _Parser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", metavar="DIR", help="the directory of records")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON (every job; schema/fleet_report.schema.json)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        type=_plot_path,
        help="also draw the shares and the passes per class into FILE (matplotlib; "
        "PNG, SVG, PDF or any format it writes, by the extension)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="FILE",
        type=_prometheus_path,
        help="also write the per-job counts into FILE in Prometheus's text format, in the "
        "families of AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR's files (for node_exporter's "
        "textfile collector; docs/usage.md)",
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        type=_when,
        help="only processes started at or after WHEN (ISO 8601)",
    )
    parser.add_argument(
        "--until", metavar="WHEN", type=_when, help="only processes started at or before WHEN"
    )
    parser.add_argument("--job", metavar="NAME", action="append", help="only this job (repeatable)")
    parser.add_argument(
        "--all-jobs",
        action="store_true",
        help="the table shows the jobs in which no process ran a backward pass too "
        "(by default one line counts them)",
    )
    parser.add_argument(
        "--top",
        metavar="N",
        type=_not_negative,
        default=0,
        help="the table shows the N jobs with the most processes that ran a backward pass "
        "(default 0: all)",
    )
    parser.add_argument(
        "--width",
        metavar="COLUMNS",
        type=_not_negative,
        default=None,
        help=f"the table's width: long job names and lists lose their middles to fit "
        f"(default: the terminal's, or {DEFAULT_WIDTH}; 0: no limit)",
    )
    parser.add_argument(
        "--by-placement",
        action="store_true",
        help="the threading cost per class and where the measured threads could run: "
        '"CLASS [N CPUs]" (Note [Grouping by where the threads ran])',
    )
    parser.add_argument(
        "--workers",
        metavar="N",
        type=int,
        default=default_workers(),
        help="processes that read the records (default: the usable cores, at most "
        f"{MAX_WORKERS}; 1 reads in this process)",
    )
    cached = parser.add_mutually_exclusive_group()
    cached.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="keep what each record file gave the report in DIR, so that a re-run reads only "
        "the files that changed (default: $XDG_CACHE_HOME or ~/.cache, then "
        "autograd_device_logging/fleet-report; never the records' DIR; Note [The report's "
        "cache])",
    )
    cached.add_argument(
        "--no-cache", action="store_true", help="read every file, and keep nothing for the next run"
    )
    return parser
