"""The fleet report's figure (--plot): shares of processes with each event,
passes per class for the jobs with most, and, where jobs measured it, the
threading cost per job and class as a forest plot. Needs matplotlib."""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

from . import vocabulary
from .fleet_totals import ALL_JOBS
from .record_fields import CLASSES

# The class whose cost is known to be zero: CPU-only passes run on the calling
# thread in both modes, so its estimates are the negative control, drawn
# beside the others.
NEGATIVE_CONTROL = vocabulary.CPU_ONLY


class ForestRow(NamedTuple):
    """One job's estimate in a class, as the forest plot draws it."""

    job: str
    percent: float
    interval: Optional[Tuple[float, float]]
    meets_level: bool
    label: str


def forest_rows(report: dict, device_class: str, top: int = 30) -> Tuple[List[ForestRow], int]:
    """The jobs that measured `device_class`, sorted by estimate (the
    largest last, at the top of the plot), at most `top` of them: those with
    the most units, then `(all jobs)` below them; and how many jobs measured
    it. A job with one unit has no interval (Note [Intervals from order
    statistics], cost_statistics.py)."""
    jobs = [
        (job, s["threading_cost"][device_class])
        for job, s in report["jobs"].items()
        if job != ALL_JOBS and device_class in (s.get("threading_cost") or {})
    ]
    measured = len(jobs)
    jobs.sort(key=lambda item: (-item[1]["units"], item[0]))
    shown = sorted(jobs[:top], key=lambda item: (item[1]["median_percent"], item[0]))
    everything = (report["jobs"].get(ALL_JOBS, {}).get("threading_cost") or {}).get(device_class)
    if everything is not None:
        shown.insert(0, (ALL_JOBS, everything))
    rows = []
    for job, cost in shown:
        interval = cost["interval"]
        rows.append(
            ForestRow(
                job=job,
                percent=cost["median_percent"],
                interval=tuple(interval["percent"]) if interval else None,
                meets_level=bool(interval and interval["meets_level"]),
                label=f"{job[:28]} ({_units(cost)}"
                + (f", {100.0 * interval['level']:.1f}%)" if interval else ")"),
            )
        )
    return rows, measured


def _units(cost: dict) -> str:
    n, over = cost["units"], cost["over"]
    return f"{n} {_ONE.get(over, over) if n == 1 else over}"


_ONE = {"processes": "process", "runs": "run", "jobs": "job"}


def _draw_forest(axes, rows: List[ForestRow], device_class: str, measured: int) -> None:
    """Each row's estimate as a point, its interval as a line: solid where it
    reaches 95%, dashed where the units are too few (their range)."""
    for y, row in enumerate(rows):
        color = "black" if row.job == ALL_JOBS else "tab:blue"
        if row.interval is not None:
            axes.hlines(
                y,
                *row.interval,
                colors=color,
                linestyles="solid" if row.meets_level else "dashed",
            )
        axes.plot([row.percent], [y], "o", color=color)
    axes.axvline(0.0, color="grey", linewidth=0.8)
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([row.label for row in rows], fontsize=7)
    axes.set_xlabel("single-threaded backward, (off - on) / on, %")
    title = device_class + (" (negative control)" if device_class == NEGATIVE_CONTROL else "")
    shown = len(rows) - (1 if rows and rows[0].job == ALL_JOBS else 0)
    if shown < measured:
        title += f"\n{shown} of {measured} jobs, those with most units"
    axes.set_title(title, fontsize=9)


def supported_formats() -> frozenset:
    """The file extensions matplotlib writes (raises ImportError without
    it)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return frozenset(FigureCanvasBase.get_supported_filetypes())


def plot(report: dict, path: str, top: int = 30) -> None:
    """The share of backward-running processes with each event, per torch
    release and overall; then passes per class for the `top` jobs with the
    most passes (the rest summed), on a log axis, where jobs without
    statistics are not drawn; then, for each class that jobs measured, the
    negative control first, a forest plot of their threading cost
    (forest_rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    releases = dict(report["releases"])
    everything = report["jobs"].get(ALL_JOBS)
    groups = list(releases.items())
    if everything is not None:
        groups.append(("all", everything))
    jobs = [
        (job, s["passes_per_class"])
        for job, s in report["jobs"].items()
        if job != ALL_JOBS and s["passes_per_class"]
    ]
    jobs.sort(key=lambda item: (-sum(item[1].values()), item[0]))
    if len(jobs) > top:
        rest = jobs[top:]
        summed = {c: sum(p[c] for _, p in rest) for c in CLASSES}
        jobs = jobs[:top] + [(f"{len(rest)} other jobs", summed)]
    forests = [(c, *forest_rows(report, c, top)) for c in _classes_measured(report)]
    tallest = max((len(rows) for _, rows, _ in forests), default=0)
    fig = plt.figure(
        figsize=(
            max(8.0, 0.5 * len(jobs) + 4, 4.5 * len(forests)),
            9 + (0.25 * tallest + 2 if forests else 0),
        )
    )
    heights = [2, 3] + ([max(3.0, 0.25 * tallest + 1)] if forests else [])
    grid = fig.add_gridspec(len(heights), max(1, len(forests)), height_ratios=heights)
    shares = fig.add_subplot(grid[0, :])
    passes = fig.add_subplot(grid[1, :])
    for i, (device_class, rows, measured) in enumerate(forests):
        _draw_forest(fig.add_subplot(grid[2, i]), rows, device_class, measured)
    width = 0.38
    for i, event in enumerate(("multidevice", "gpu_cpu")):
        values = [
            100.0 * g["processes_with"][event] / g["processes"] if g["processes"] else 0.0
            for _, g in groups
        ]
        bars = shares.bar([x + (i - 0.5) * width for x in range(len(groups))], values, width)
        bars.set_label(event)
    shares.set_xticks(range(len(groups)))
    shares.set_xticklabels(
        [
            f"{'all releases' if i == len(releases) else 'torch ' + name}\n"
            f"({g['processes']} processes)"
            for i, (name, g) in enumerate(groups)
        ]
    )
    shares.set_ylabel("% of processes that ran backward")
    shares.set_ylim(0, 100)
    shares.set_title("Processes whose backward passes raised each event")
    shares.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if jobs:
        width = 0.8 / len(CLASSES)
        for i, c in enumerate(CLASSES):
            xs = [x + (i - 1.5) * width for x in range(len(jobs))]
            passes.bar(xs, [max(p[c], 0) for _, p in jobs], width, label=c)
        passes.set_yscale("symlog", linthresh=1)
        passes.set_xticks(range(len(jobs)))
        passes.set_xticklabels([j[:32] for j, _ in jobs], rotation=30, ha="right")
        passes.legend(title="pass class", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        passes.set_title(f"Backward passes per class, the {min(len(jobs), top)} jobs with most")
    else:
        passes.text(0.5, 0.5, "no job ran with AUTOGRAD_DEVICE_LOGGING_STATS=1", ha="center")
        passes.set_axis_off()
    passes.set_ylabel("backward passes (log)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _classes_measured(report: dict) -> List[str]:
    """The classes any job measured, the negative control first, then the
    known ones in order and any other by name."""
    found = {c for s in report["jobs"].values() for c in (s.get("threading_cost") or {})}
    known = [c for c in dict.fromkeys((NEGATIVE_CONTROL, *CLASSES)) if c in found]
    return known + sorted(found - set(known))
