"""The fleet report's figure (--plot): shares of processes with each event,
and passes per class for the jobs with most. Needs matplotlib."""

from __future__ import annotations

from .fleet_totals import ALL_JOBS
from .record_fields import CLASSES


def plot(report: dict, path: str, top: int = 30) -> None:
    """The share of backward-running processes with each event, per torch
    release and overall; then passes per class for the `top` jobs with the
    most passes (the rest summed), on a log axis. Jobs without statistics are
    not drawn."""
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
    fig, (shares, passes) = plt.subplots(
        2, 1, figsize=(max(8.0, 0.5 * len(jobs) + 4), 9), gridspec_kw={"height_ratios": [2, 3]}
    )
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
