"""The fleet report as text: the table per job, the threading cost's table,
and the lines about what was left out or skipped."""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import Dict, List, Optional

from . import vocabulary
from .fleet_totals import ALL_JOBS
from .record_fields import CLASSES, EVENTS

# The job table's column for each device class: the classes' names are the
# record's (record_fields.CLASSES); the table abbreviates them so that it fits
# its width, and says so under it.
_CLASS_COLUMNS = {
    vocabulary.CPU_ONLY: "cpu",
    vocabulary.SINGLE_ACCELERATOR: "1 acc",
    vocabulary.ACCELERATOR_CPU: "acc+cpu",
    vocabulary.MULTI_ACCELERATOR: "2+ acc",
}
#: The table's width where stdout is not a terminal.
DEFAULT_WIDTH = 120
# The narrowest a shortened cell gets.
_NARROWEST = 12


def _left_out_text(left_out: Dict[str, int]) -> str:
    agents = left_out.get("torchrun agent", 0)
    idle = left_out.get("no backward pass", 0)
    disabled = sum(n for k, n in left_out.items() if k.startswith("disabled: "))
    parts = []
    if agents:
        parts.append(f"{agents} agent{'s' if agents != 1 else ''}")
    if idle:
        parts.append(f"{idle} no backward")
    if disabled:
        parts.append(f"{disabled} disabled")
    return ", ".join(parts) or "-"


def _aligned(rows: List[List[str]], width: Optional[int] = None, shrink=()) -> List[str]:
    """The rows as text, each column padded to its widest cell. With a
    `width`, the columns in `shrink` (the text ones, in the order given) lose
    their cells' middles, marked by "...", until the rows fit it, or each of
    them is down to a few characters."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    if width is not None:
        for column in shrink:
            excess = sum(widths) + 2 * (len(widths) - 1) - width
            if excess <= 0:
                break
            widths[column] = max(min(_NARROWEST, widths[column]), widths[column] - excess)
        rows = [[_shortened(cell, w) for cell, w in zip(row, widths)] for row in rows]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _shortened(text: str, width: int) -> str:
    """`text` in `width` characters: its middle replaced by "..." if longer."""
    if len(text) <= width:
        return text
    head = (width - 3 + 1) // 2
    return text[:head] + "..." + text[len(text) - (width - 3 - head) :]


def _wrapped(width: Optional[int], text: str) -> List[str]:
    """A paragraph under a table, in lines of at most `width` (None: one)."""
    return textwrap.wrap(text, width, break_on_hyphens=False) if width else [text]


def _plural(n: int, word: str, plural: Optional[str] = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def format_table(
    report: dict, all_jobs: bool = False, top: int = 0, width: Optional[int] = DEFAULT_WIDTH
) -> str:
    """The report as text. The job table has the jobs in which a process ran
    a backward pass (all of them with `all_jobs`), the `top` of them with the
    most such processes where `top` is positive, and a row for all jobs; the
    rest are summed up in a line. It fits `width` columns (None: any)."""
    summary, skipped = report["jobs"], report["skipped"]
    jobs = [j for j in summary if j != ALL_JOBS]
    shown = [j for j in jobs if all_jobs or summary[j]["processes"]]
    idle = [j for j in jobs if j not in shown]
    if top > 0:
        ranked = sorted(shown, key=lambda j: (-summary[j]["processes"], j))
        shown, beyond = ranked[:top], ranked[top:]
    else:
        shown, beyond = sorted(shown), []
    header = [
        "job",
        "processes",
        "ranks",
        "multidevice",
        "gpu_cpu",
        *(_CLASS_COLUMNS.get(c, c) for c in CLASSES),
        "torch",
        "left out",
    ]
    body = []
    for job in shown + ([ALL_JOBS] if ALL_JOBS in summary else []):
        s = summary[job]
        n = s["processes"]
        shares = [
            (
                f"{s['processes_with'][e]}/{n} ({100.0 * s['processes_with'][e] / n:.0f}%)"
                if n
                else "-"
            )
            for e in ("multidevice", "gpu_cpu")
        ]
        passes = s["passes_per_class"]
        body.append(
            [
                job,
                str(n),
                str(s["ranks"]),
                *shares,
                *(str(passes[c]) if passes else "-" for c in CLASSES),
                ", ".join(s["torch"]) or "-",
                _left_out_text(s["left_out"]),
            ]
        )
    # The text columns give way: the job's name (often a path), torch, left out.
    lines = _aligned([header, *body], width, shrink=(0, len(header) - 2, len(header) - 1))
    if beyond:
        processes = sum(summary[j]["processes"] for j in beyond)
        lines += _wrapped(
            width,
            f"... and {_plural(len(beyond), 'more job')} with "
            f"{_plural(processes, 'process', 'processes')} that ran a backward pass "
            f"(--top {top}; --top 0 shows all)",
        )
    if idle:
        left_out: Counter = Counter()
        for j in idle:
            left_out.update(summary[j]["left_out"])
        lines += _wrapped(
            width,
            f"{_plural(len(idle), 'job')} in which no process ran a backward pass, not shown "
            f"({_left_out_text(left_out)}; --all-jobs shows them)",
        )
    lines.append("")
    lines += _wrapped(
        width,
        "processes: those that ran a backward pass (a restarted rank once); multidevice / "
        "gpu_cpu: those whose passes raised the event; passes per class ("
        + ", ".join(f"{_CLASS_COLUMNS.get(c, c)}: {c}" for c in CLASSES)
        + "): summed over processes that ran with AUTOGRAD_DEVICE_LOGGING_STATS=1 "
        "('-': none did)",
    )
    reasons = Counter()
    for s in summary.values() if ALL_JOBS not in summary else [summary[ALL_JOBS]]:
        reasons.update({k: v for k, v in s["left_out"].items() if k.startswith("disabled: ")})
    for reason, count in sorted(reasons.items()):
        lines.append(f"left out, {count} process{'es' if count != 1 else ''} {reason}")
    lines += _newer_names_text(summary)
    cost = format_threading_cost(summary, width)
    if cost:
        lines += ["", cost]
    if report.get("filtered"):
        lines.append(f"{report['filtered']} records outside --since/--until/--job")
    for reason, count in skipped.items():
        lines.append(f"{count} record{'s' if count != 1 else ''} skipped: {reason}")
    return "\n".join(lines)


def _newer_names_text(summary: dict) -> List[str]:
    """A line per event and class that only records of a newer minor version
    name (Note [A newer minor version adds fields and values]), over all
    jobs."""
    whole = summary.get(ALL_JOBS) or next(iter(summary.values()), None)
    if whole is None:
        return []
    n = whole["processes"]
    lines = [
        f"event {name} (from a newer library): {count}/{n} processes"
        for name, count in whole["processes_with"].items()
        if name not in EVENTS.values()
    ]
    lines += [
        f"class {name} (from a newer library): {count} passes"
        for name, count in (whole["passes_per_class"] or {}).items()
        if name not in CLASSES
    ]
    return lines


def _signed(value: float) -> str:
    return f"{value:+.1f}%"


def _level(level: float) -> str:
    """An exact coverage as a percentage, without trailing zeros."""
    return f"{100.0 * level:.2f}".rstrip("0").rstrip(".") + "%"


def _interval_text(interval) -> str:
    if interval is None:
        return "n/a"
    low, high = interval["percent"]
    text = f"[{_signed(low)}, {_signed(high)}] {_level(interval['level'])}"
    return text if interval["meets_level"] else text + " (range)"


def _units_text(cost: dict) -> str:
    n, over = cost["units"], cost["over"]
    if over == "jobs":
        return f"{n} job{'s' if n != 1 else ''}"
    processes = cost["processes"] - cost["ranks"]
    parts = []
    if cost["ranks"]:
        ranks = cost["ranks"]
        parts.append(f"1 run ({ranks} rank process{'es' if ranks != 1 else ''})")
    if processes:
        parts.append(f"{processes} process{'es' if processes != 1 else ''}")
    return " + ".join(parts)


def format_threading_cost(summary: dict, width: Optional[int] = DEFAULT_WIDTH) -> str:
    """The measured cost of single-threaded backward: a row per job and
    class, the largest estimate first, then each class over all jobs; empty
    when no job measured it."""
    rows = [
        (job, device_class, cost)
        for job, s in summary.items()
        for device_class, cost in (s.get("threading_cost") or {}).items()
    ]
    if not rows:
        return ""
    rows.sort(key=lambda row: (row[0] == ALL_JOBS, -row[2]["median_percent"], row[0], row[1]))
    header = ["job", "class", "single-threaded backward", "interval, coverage", "units", "off - on"]
    body = [
        [
            job,
            device_class,
            _signed(cost["median_percent"]),
            _interval_text(cost["interval"]),
            _units_text(cost),
            f"{cost['median_difference_ms']:+.3f} ms",
        ]
        for job, device_class, cost in rows
    ]
    lines = _aligned([header, *body], width, shrink=(4, 0))
    lines.append("")
    lines += _wrapped(
        width,
        "single-threaded backward: per process, the median over its measured pairs of passes "
        "(one with multithreading off, one on; AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING=1) of "
        "(off - on) / on; positive: slower single-threaded. A job's estimate is the median over "
        "its units: each process, and the ranks of a run as one (they are not independent); "
        f"{ALL_JOBS} gives each job one vote. Interval: between order statistics of the units, "
        "with its exact coverage of their median, 95% or more where the units allow; "
        "(range): too few units for 95%, the units' range and its coverage; n/a: one unit. "
        "It estimates what a sampled pass costs single-threaded inside a running process, the "
        "other mode's threads kept warm between its passes; not what turning multithreading off "
        "for whole processes does, which moves more from one process to the next "
        "(docs/threading-cost.md sets the two side by side).",
    )
    return "\n".join(lines)
