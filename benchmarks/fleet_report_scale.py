"""Times the fleet report on synthetic fleets of 10^4, 10^5 and 10^6 records.

    python3 benchmarks/fleet_report_scale.py [--sizes 10000 100000 1000000]
        [--output docs/fleet-report-scale.md]

Each fleet is a directory of schema-2.0 records as the library writes them
(one file per process, one line of JSON): jobs of 32 ranks on 4 hosts, one
torchrun agent per job, a restart of rank 0 in every tenth job, a CPU-only
evaluation process per job, a tenth of the jobs with the statistics on, a
mix of torch 2.13.0 and 2.15.0 and of both events. The report runs as users
run it, `python -m autograd_device_logging report DIR --json`, in a child
process of its own; the script records its wall time and its peak resident
memory (wait4's ru_maxrss), checks that it counted every process, and
writes both, with the machine and Python version, into --output. Targets on
a 2-core machine: 10^6 records in at most 30 s with a peak RSS of at most
300 MB.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS_PER_JOB = 32
TARGET_SECONDS = 30.0
TARGET_MB = 300.0


def records(count):
    """`count` records: the job's ranks, agent, restart and evaluation."""
    written = 0
    job = 0
    while written < count:
        name = f"train-{job:06d}"
        torch = "2.15.0" if job % 2 else "2.13.0"
        stats = job % 10 == 0
        members = [("rank", r) for r in range(RANKS_PER_JOB)] + [("agent", None), ("other", None)]
        if job % 10 == 3:
            members.append(("rank", 0))  # rank 0 restarted
        for role, rank in members:
            if written == count:
                return
            pid = 1000 + written
            events = []
            if role == "rank" and job % 4 == 0:
                events.append("torch.autograd.multidevice_backward")
            if role == "rank" and job % 3 == 0:
                events.append("torch.autograd.gpu_cpu_backward")
            yield {
                "schema": "2.0",
                "time": "2026-12-01T10:00:00Z",
                "start_time": f"2026-11-{1 + job % 28:02d}T09:00:00Z",
                "written_at": "exit",
                "host": f"node{(job * 4 + (rank or 0) // 8) % 5000:04d}",
                "pid": pid,
                "program": "train.py",
                "job": name,
                "job_source": "torchrun",
                "role": role,
                "rank": rank,
                "local_rank": None if rank is None else rank % 8,
                "world_size": None if rank is None else RANKS_PER_JOB,
                "torch": {"built_for": torch, "running": torch},
                "library_version": "0.1.0",
                "activated_by": "on torch import",
                "accelerators": {"cuda": 8},
                "events": events,
                "events_logged_by": "torch" if torch == "2.15.0" else "library",
                "ran_backward": role != "agent",
                "passes_classified": 10,
                "pass_classes": (
                    {
                        "cpu_only": 0,
                        "single_accelerator": 1000,
                        "accelerator_cpu": 10 * len(events),
                        "multi_accelerator": 3,
                    }
                    if stats
                    else None
                ),
                "disabled_reason": None,
            }
            written += 1
        job += 1


def make_fleet(directory, count):
    for i, record in enumerate(records(count)):
        with open(os.path.join(directory, f"{record['host']}-{record['pid']}-{i}.json"), "w") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")


def measured(directory):
    """Wall seconds and peak RSS (MB) of one report run in a child."""
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    env.pop("AUTOGRAD_DEVICE_LOGGING_REPORT_DIR", None)
    out = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "autograd_device_logging", "report", directory, "--json"],
        env=env,
        stdout=out,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"the report failed:\n{err}")
    out.seek(0)
    return json.load(out), seconds, usage.ru_maxrss / 1024.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6])
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "fleet-report-scale.md"))
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        directory = tempfile.mkdtemp(prefix=f"adl-fleet-{size}-")
        try:
            made = time.perf_counter()
            make_fleet(directory, size)
            made = time.perf_counter() - made
            report, seconds, peak_mb = measured(directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        everything = report["jobs"]["(all jobs)"]
        counted = everything["processes"] + sum(everything["left_out"].values())
        restarts = size - counted - sum(report["skipped"].values())
        print(
            f"{size} records: {seconds:.1f} s, peak RSS {peak_mb:.0f} MB "
            f"(made in {made:.0f} s; {everything['processes']} processes, "
            f"{restarts} restarts folded)",
            flush=True,
        )
        rows.append((size, seconds, peak_mb, everything["processes"], len(report["jobs"]) - 1))
    lines = [
        "# The fleet report at scale",
        "",
        f"Written by `python3 benchmarks/fleet_report_scale.py` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} "
        f"({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}).",
        "",
        "Synthetic fleets of schema-2.0 records (jobs of 32 ranks, an agent, an evaluation "
        "process, a restart in every tenth job, torch 2.13.0 and 2.15.0), one file per "
        "process as the library writes them; `python -m autograd_device_logging report DIR "
        "--json` in a child process, its wall time and peak resident memory.",
        "",
        "| records | jobs | processes counted | seconds | peak RSS MB |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for size, seconds, peak_mb, processes, jobs in rows:
        lines.append(f"| {size:,} | {jobs:,} | {processes:,} | {seconds:.1f} | {peak_mb:.0f} |")
    largest = max(rows)
    if largest[0] >= 10**6:
        met = largest[1] <= TARGET_SECONDS and largest[2] <= TARGET_MB
        lines += [
            "",
            f"Target for 10^6 records: at most {TARGET_SECONDS:.0f} s and {TARGET_MB:.0f} MB; "
            f"measured {largest[1]:.1f} s and {largest[2]:.0f} MB: "
            + ("met." if met else "MISSED."),
        ]
    lines.append("")
    with open(args.output, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
