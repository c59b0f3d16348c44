"""Which jobs run multi-device or accelerator+CPU backward passes, and how often.

    python -m autograd_device_logging report DIR [--json] [--plot PNG]

DIR holds one record per process, written by the library at exit when
AUTOGRAD_DEVICE_LOGGING_REPORT_DIR (or the launcher's --report) named it
(Note [The per-process record] in torch/csrc/autograd/process_record.h).
The report has a row per job and one for all jobs: processes, ranks, the
share of processes that emitted each event, the passes per class where the
statistics counted them, and the torch versions. Unreadable records (truncated,
corrupted, foreign) and records of a newer schema are skipped and counted.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections import defaultdict
from typing import Dict, List, Tuple

SCHEMA = 1
EVENTS = {
    "torch.autograd.multidevice_backward": "multidevice",
    "torch.autograd.gpu_cpu_backward": "gpu_cpu",
}
CLASSES = ("cpu_only", "single_accelerator", "accelerator_cpu", "multi_accelerator")
ALL_JOBS = "(all jobs)"


def load_records(directory: str) -> Tuple[List[dict], Dict[str, int]]:
    """The records in `directory`, and how many files were skipped, by reason."""
    records, skipped = [], {"unreadable": 0, "newer schema": 0}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        try:
            with open(path, "rb") as f:
                record = json.loads(f.read().decode("utf-8"))
            schema = record["schema"]
            if not isinstance(schema, int):
                raise TypeError("schema")
            if schema > SCHEMA:
                skipped["newer schema"] += 1
                continue
            record["job"], record["pid"], record["events"]  # the fields every record has
        except (OSError, ValueError, TypeError, KeyError):
            skipped["unreadable"] += 1
            continue
        records.append(record)
    return records, skipped


def summarize(records: List[dict]) -> Dict[str, dict]:
    """{job: summary}, with ALL_JOBS for every record together."""
    groups = defaultdict(list)
    for record in records:
        groups[str(record["job"])].append(record)
    groups[ALL_JOBS] = list(records)
    summary = {}
    for job, rows in groups.items():
        counted = [r["pass_classes"] for r in rows if isinstance(r.get("pass_classes"), dict)]
        summary[job] = {
            "processes": len(rows),
            "ranks": len({(r.get("host"), r["rank"]) for r in rows if r.get("rank") is not None}),
            "processes_with": {
                short: sum(name in r["events"] for r in rows) for name, short in EVENTS.items()
            },
            "passes_per_class": (
                {c: sum(int(p.get(c, 0)) for p in counted) for c in CLASSES} if counted else None
            ),
            "processes_counting_passes": len(counted),
            "torch": sorted({str((r.get("torch") or {}).get("running", "?")) for r in rows}),
        }
    return summary


def format_table(summary: Dict[str, dict], skipped: Dict[str, int]) -> str:
    header = [
        "job",
        "processes",
        "ranks",
        "multidevice",
        "gpu_cpu",
        *CLASSES,
        "torch",
    ]
    body = []
    for job in sorted(summary, key=lambda j: (j == ALL_JOBS, j)):
        s = summary[job]
        n = s["processes"]
        shares = [
            f"{s['processes_with'][e]}/{n} ({100.0 * s['processes_with'][e] / n:.0f}%)"
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
                ", ".join(s["torch"]),
            ]
        )
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *body]
    ]
    lines.append("")
    lines.append(
        "multidevice / gpu_cpu: processes that emitted the event; passes per class: summed "
        "over processes that ran with PYTORCH_AUTOGRAD_DEVICE_STATS=1 ('-': none did)"
    )
    for reason, count in skipped.items():
        if count:
            lines.append(f"{count} {reason} record{'s' if count != 1 else ''} skipped")
    return "\n".join(lines)


def plot(summary: Dict[str, dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    jobs = sorted(j for j in summary if j != ALL_JOBS)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.2 * len(jobs) + 4), 4.5))
    width = 0.8 / len(CLASSES)
    for i, c in enumerate(CLASSES):
        values = [(summary[j]["passes_per_class"] or {}).get(c, 0) for j in jobs]
        ax.bar([x + (i - 1.5) * width for x in range(len(jobs))], values, width, label=c)
    ax.set_xticks(range(len(jobs)))
    ax.set_xticklabels(jobs, rotation=20, ha="right")
    ax.set_xlabel("job")
    ax.set_ylabel("backward passes")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts
    ax.set_title("Backward passes per device class, per job")
    ax.legend(title="pass class", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None, prog=None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", metavar="DIR", help="the directory of records")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--plot", metavar="PNG", help="also draw passes per class per job (needs matplotlib)"
    )
    args = parser.parse_args(argv)
    if not os.path.isdir(args.directory):
        print(f"{parser.prog}: {args.directory!r} is not a directory", file=sys.stderr)
        return 2
    records, skipped = load_records(args.directory)
    summary = summarize(records)
    if args.json:
        print(json.dumps({"jobs": summary, "skipped": skipped}, indent=2, sort_keys=True))
    else:
        print(format_table(summary, skipped))
    if args.plot:
        try:
            plot(summary, args.plot)
        except ImportError:
            print(
                f"{parser.prog}: --plot needs matplotlib: pip install matplotlib",
                file=sys.stderr,
            )
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
