"""Times the fleet report, and DuckDB's documented query, on synthetic fleets
of 10^4, 10^5 and 10^6 records with the threading-cost measurement on.

    python3 benchmarks/fleet_report_scale.py [--sizes 10000 100000 1000000]
        [--output docs/fleet-report-scale.md]

Each fleet is a directory of records of the schema version the library
writes now (read from process_record.cpp), one file per process as the
library writes them: jobs of 16 ranks on 2 hosts, a torchrun agent per host,
a restart of rank 0 in every tenth job, torch 2.13.0 and 2.15.0, and on every
rank 64 measured pairs in one class (single_accelerator), each job with its
own true cost and each rank its own offset. A sample of the records is
checked against the schema first.

Then every file is read once, untimed, so that both start warm in the page
cache, and each runs --repeat times (3), in a child process of its own, on
the same files: the report as users run it (`python -m autograd_device_logging
report DIR --json`), and docs/fleet-report.sql under DuckDB (the per-job
counts, not the cost table). For each: the median and the range of the wall
time, and the highest peak resident memory of its whole process tree (the
report's reading processes included), sampled every 20 ms. The script checks that the report counted every process
and that DuckDB's counts agree, and writes the table, with the commit, the
machine and the versions, into --output. Targets on a 2-core machine: 10^6
records in at most 30 s and 300 MB, 4 times ahead of DuckDB.
"""

import argparse
import datetime
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import doc_sections

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS_PER_JOB = 16
HOSTS_PER_JOB = 2
PAIRS = 64
TARGET_SECONDS = 30.0
TARGET_MB = 300.0
TARGET_AHEAD = 4.0
# What the issue measured for DuckDB at 10^6 records, before the query typed
# its columns.
DUCKDB_BEFORE_SECONDS = 116.1


def schema_version():
    with open(os.path.join(REPO, "torch", "csrc", "autograd", "process_record.cpp")) as f:
        return re.search(r'kRecordSchema = "([0-9.]+)"', f.read()).group(1)


def records(count, seed=0):
    """`count` records: each job's agents, ranks and restart."""
    rng = random.Random(seed)
    version = schema_version()
    written = 0
    job = 0
    while written < count:
        name = f"train-{job:06d}"
        torch = "2.15.0" if job % 2 else "2.13.0"
        cost = rng.gauss(3.0, 5.0) / 100.0
        members = [("agent", None, h) for h in range(HOSTS_PER_JOB)]
        members += [("rank", r, r * HOSTS_PER_JOB // RANKS_PER_JOB) for r in range(RANKS_PER_JOB)]
        if job % 10 == 3:
            members.append(("rank", 0, 0))  # rank 0 restarted
        for role, rank, host in members:
            if written == count:
                return
            threading_cost = None
            if role == "rank":
                offset = rng.gauss(0.0, 0.05)
                on = [int(rng.lognormvariate(16.0, 0.1)) for _ in range(PAIRS)]
                pairs = [[max(1, int(o * (1 + cost + offset + rng.gauss(0, 0.03)))), o] for o in on]
                threading_cost = {
                    "pairs": {"single_accelerator": pairs},
                    "not_sampled": {"nested": 1},
                    "discarded": {},
                    "rate": 0.01,
                    "warmup": 100,
                    "max_pairs": PAIRS,
                    "washout": 1,
                }
            events = []
            if role == "rank" and job % 3 == 0:
                events.append("torch.autograd.gpu_cpu_backward")
            yield {
                "schema": version,
                "time": "2026-12-01T10:00:00Z",
                "start_time": f"2026-11-{1 + job % 28:02d}T09:00:00Z",
                "written_at": "exit" if job % 7 else "measurement",
                "host": f"node{(job * HOSTS_PER_JOB + host) % 5000:04d}",
                "pid": 1000 + written,
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
                "passes_classified": 1000,
                "pass_classes": None,
                "disabled_reason": None,
                "threading_cost": threading_cost,
            }
            written += 1
        job += 1


def check_against_schema(count=200):
    try:
        import jsonschema
    except ImportError:
        print("jsonschema is not installed: the records are not checked against the schema")
        return
    with open(os.path.join(REPO, "schema", "process_record.schema.json")) as f:
        schema = json.load(f)
    for record in records(count):
        jsonschema.validate(record, schema)


def make_fleet(directory, count):
    for i, record in enumerate(records(count)):
        with open(os.path.join(directory, f"{record['host']}-{record['pid']}-{i}.json"), "w") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")


def warm(directory):
    """Reads every file of `directory` once, so that the timed runs start
    from the page cache and not from whatever the machine did before."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for entry in os.scandir(fd):
            with open(
                entry.name, "rb", opener=lambda name, flags: os.open(name, flags, dir_fd=fd)
            ) as f:
                f.read()
    finally:
        os.close(fd)


def repeated(run, directory, repeat):
    """(median seconds, [fastest, slowest], highest peak MB, the last run's
    result) of `repeat` runs."""
    runs = [run(directory) for _ in range(repeat)]
    seconds = sorted(r[0] for r in runs)
    return seconds[len(seconds) // 2], [seconds[0], seconds[-1]], max(r[1] for r in runs), runs[-1]


def tree_rss_kb(pid):
    """The resident memory of `pid` and its descendants, in KB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return total


def measured(command, env):
    """Wall seconds, peak RSS of the process tree (MB) and stdout of
    `command`."""
    out = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_kb(proc.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    err = proc.stderr.read().decode()
    proc.wait()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"{command} failed:\n{err}")
    out.seek(0)
    return seconds, peak[0] / 1024.0, out.read().decode()


def report_run(directory):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    env.pop("AUTOGRAD_DEVICE_LOGGING_REPORT_DIR", None)
    seconds, peak, out = measured(
        [sys.executable, "-m", "autograd_device_logging", "report", directory, "--json"], env
    )
    return seconds, peak, json.loads(out)


DUCKDB_PROGRAM = """
import json, sys
import duckdb
with open(sys.argv[1]) as f:
    query = f.read().replace("records/*.json", sys.argv[2] + "/*.json")
connection = duckdb.connect()
connection.execute("SET enable_progress_bar = false")
print(json.dumps(connection.sql(query).fetchall()))
"""


def duckdb_available():
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return False
    return True


def duckdb_run(directory):
    import duckdb

    seconds, peak, out = measured(
        [
            sys.executable,
            "-c",
            DUCKDB_PROGRAM,
            os.path.join(REPO, "docs", "fleet-report.sql"),
            directory,
        ],
        dict(os.environ),
    )
    return seconds, peak, json.loads(out), duckdb.__version__


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6])
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "fleet-report-scale.md"))
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (3)")
    args = parser.parse_args()
    check_against_schema()
    rows = []
    duckdb_version = None
    for size in args.sizes:
        directory = tempfile.mkdtemp(prefix=f"adl-fleet-{size}-")
        try:
            made = time.perf_counter()
            make_fleet(directory, size)
            made = time.perf_counter() - made
            os.sync()  # no write-back of the new files during the runs
            warm(directory)
            seconds, spread, peak_mb, (_, _, report) = repeated(report_run, directory, args.repeat)
            duck = None
            if duckdb_available():
                duck_seconds, duck_spread, duck_mb, (_, _, duck_counts, duckdb_version) = repeated(
                    duckdb_run, directory, args.repeat
                )
                duck = (duck_seconds, duck_spread, duck_mb, duck_counts)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        jobs = report["jobs"]
        everything = jobs["(all jobs)"]
        counted = everything["processes"] + sum(everything["left_out"].values())
        restarts = size - counted - sum(report["skipped"].values())
        if report["skipped"]:
            sys.exit(f"the report skipped records: {report['skipped']}")
        cost = everything["threading_cost"]["single_accelerator"]
        if cost["processes"] != everything["ranks"] + restarts:
            sys.exit(f"the report measured {cost['processes']} processes, not every rank")
        duck_row = None
        if duck is not None:
            duck_seconds, duck_spread, duck_mb, duck_counts = duck
            expected = [
                [
                    job,
                    s["processes"],
                    s["processes_with"]["multidevice"],
                    s["processes_with"]["gpu_cpu"],
                ]
                for job, s in sorted(jobs.items())
                if job != "(all jobs)"
            ]
            if duck_counts != expected:
                sys.exit("DuckDB's per-job counts differ from the report's")
            duck_row = (duck_seconds, duck_mb, duck_spread)
        print(
            f"{size} records: report {seconds:.1f} s ({spread[0]:.1f}-{spread[1]:.1f}), "
            f"{peak_mb:.0f} MB"
            + (f"; DuckDB {duck_row[0]:.1f} s, {duck_row[1]:.0f} MB" if duck_row else "")
            + f" (made in {made:.0f} s; {everything['processes']} processes, "
            f"{restarts} restarts folded)",
            flush=True,
        )
        rows.append(
            (size, len(jobs) - 1, everything["processes"], seconds, spread, peak_mb, duck_row)
        )
    write(args, rows, duckdb_version)
    return 0


def write(args, rows, duckdb_version):
    try:
        import msgspec

        parser = f"msgspec {msgspec.__version__}"
    except ImportError:
        parser = "without msgspec"
    lines = [
        "# The fleet report at scale",
        "",
        f"Written by `python3 benchmarks/fleet_report_scale.py` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, commit "
        f"{doc_sections.commit()} ({platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {parser}"
        + (f", DuckDB {duckdb_version}" if duckdb_version else ", no DuckDB")
        + ").",
        "",
        f"Synthetic fleets of current-schema records with the threading-cost measurement on "
        f"(jobs of {RANKS_PER_JOB} ranks on {HOSTS_PER_JOB} hosts, an agent per host, a "
        f"restart in every tenth job, torch 2.13.0 and 2.15.0, {PAIRS} measured pairs on every "
        "rank), one file per process as the library writes them, every file read once "
        "before the timed runs so that they start warm in the page cache. "
        "The report: `python -m autograd_device_logging report DIR --json`, counts and cost "
        "table, with its reading processes (Note [Reading a fleet in parallel]). DuckDB: "
        "`docs/fleet-report.sql`, the per-job counts only. Each in a child process, "
        f"{args.repeat} times: the median wall time with the fastest and slowest run, and the "
        "highest peak resident memory of its whole process tree.",
        "",
        "| records | jobs | processes counted | report s | report peak MB | DuckDB s "
        "| DuckDB peak MB | report ahead of DuckDB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def timed(seconds, spread):
        return f"{seconds:.1f} ({spread[0]:.1f}-{spread[1]:.1f})"

    for size, jobs, processes, seconds, spread, peak_mb, duck in rows:
        duck_cells = (
            f"{timed(duck[0], duck[2])} | {duck[1]:.0f} | {duck[0] / seconds:.1f}x"
            if duck
            else "- | - | -"
        )
        lines.append(
            f"| {size:,} | {jobs:,} | {processes:,} | {timed(seconds, spread)} | {peak_mb:.0f} "
            f"| {duck_cells} |"
        )
    largest = max(rows)
    if largest[0] >= 10**6:
        _, _, _, seconds, spread, peak_mb, duck = largest
        met = spread[1] <= TARGET_SECONDS and peak_mb <= TARGET_MB
        lines += [
            "",
            f"Target for 10^6 records: at most {TARGET_SECONDS:.0f} s and {TARGET_MB:.0f} MB; "
            f"measured {seconds:.1f} s (slowest {spread[1]:.1f} s) and {peak_mb:.0f} MB: "
            + ("met." if met else "MISSED."),
        ]
        if duck:
            ahead = duck[0] / seconds
            lines += [
                "",
                f"The issue also asked for {TARGET_AHEAD:.0f}x ahead of DuckDB, against DuckDB's "
                f"{DUCKDB_BEFORE_SECONDS:.0f} s at 10^6 with the query as it was then "
                f"({DUCKDB_BEFORE_SECONDS / seconds:.1f}x on that figure). The query now types "
                f"its columns, and DuckDB itself took {duck[0]:.1f} s here: the report is "
                f"{ahead:.1f}x ahead of that, "
                + ("which meets it." if ahead >= TARGET_AHEAD else "not 4x."),
            ]
    if duckdb_version and largest[6]:
        _, _, _, seconds, _, peak_mb, duck = largest
        lines += [
            "",
            "**Streaming in Python or aggregating in DuckDB.** On the largest fleet, DuckDB "
            f"took {duck[0]:.1f} s and {duck[1]:.0f} MB for the per-job counts alone; the "
            f"report took {seconds:.1f} s and {peak_mb:.0f} MB for the counts and the cost "
            "table, with every record checked as the schema checks it (Note [Two ways to read "
            "a record]). DuckDB would add a dependency of the report, and its `read_json` "
            "neither checks the schema's types nor reads a newer minor's values as the report "
            "does (Note [A newer minor version adds fields and values]), so the report keeps "
            "its own reader, and `docs/fleet-report.sql` stays the query for those who already "
            "run DuckDB.",
        ]
    doc_sections.write_whole(
        args.output,
        "\n".join(["<!-- fleet-report-scale -->", *lines, "<!-- /fleet-report-scale -->"]),
    )
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
