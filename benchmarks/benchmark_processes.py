"""Running the benchmark programs for benchmarks/run_benchmarks.py: the
shell helper, which program a build has, the machine's description, and the
wall times over fresh processes (Note [Reading wall times])."""

import datetime
import json
import os
import platform
import statistics
import subprocess

import doc_sections


def sh(cmd, env=None, **kwargs):
    return subprocess.run(cmd, check=True, text=True, env=env, **kwargs)


def bench_of(build, patched):
    name = "autograd_device_logging_bench" + ("_patched" if patched else "")
    return os.path.join(os.path.dirname(build["bench"]), name)


# The wall-time configurations, as (column, library present, test accelerator
# loaded, both events fired first): "stock, test accelerator" tells what the
# accelerator alone costs from what the library costs.
WALL_STATES = (
    ("stock", False, False, False),
    ("stock, test accelerator", False, True, False),
    ("lib, no accel", True, False, False),
    ("lib, before", True, True, False),
    ("lib, after", True, True, True),
)
# Fresh processes per configuration, interleaved: round r runs every
# configuration once, starting at a different one each round.
WALL_ROUNDS = 8


def wall_once(build, patched, accelerator, fire, max_nodes):
    """One process's wall time per benchmark, in microseconds."""
    flags = [f"--accelerator={build['accel']}"] if accelerator else []
    if fire:
        flags.append("--fire")
    out = sh(
        [
            bench_of(build, patched),
            *flags,
            f"--max-nodes={max_nodes}",
            "--benchmark_format=json",
            "--benchmark_min_time=0.1",
        ],
        capture_output=True,
    ).stdout
    return {b["run_name"]: b["real_time"] for b in json.loads(out)["benchmarks"]}


def wall_times(build, max_nodes, rounds):
    """{column: {benchmark: [one value per round]}}, the configurations
    interleaved over fresh processes (Note [Reading wall times])."""
    times = {column: {} for column, *_ in WALL_STATES}
    for r in range(rounds):
        order = WALL_STATES[r % len(WALL_STATES) :] + WALL_STATES[: r % len(WALL_STATES)]
        for column, patched, accelerator, fire in order:
            print(f"  round {r + 1}/{rounds}: {column}", flush=True)
            for name, value in wall_once(build, patched, accelerator, fire, max_nodes).items():
                times[column].setdefault(name, []).append(value)
    return times


# Note [Reading wall times]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# Wall time moves with the machine's load and with each process's placement,
# by more than the library's cost: a median of 3 repetitions in one process
# per configuration once read as a 67% cost where callgrind measured 0.03%.
# So each configuration runs in WALL_ROUNDS fresh processes, interleaved
# with the others, and the table gives the median over those processes with
# their range: a difference smaller than the ranges is not a cost. The
# instruction counts are the figures to compare; the wall times say whether
# anything shows at the scale of a whole pass.
def wall_section(times, rounds, args, build):
    columns = [column for column, *_ in WALL_STATES]
    lines = [
        "<!-- wall-time -->",
        f"## Wall time, {rounds} fresh processes per configuration, interleaved",
        "",
        f"Written by `python3 benchmarks/run_benchmarks.py"
        f"{' --quick' if args.quick else ''}{' --wall-time-only' if args.wall_time_only else ''}"
        f"` on {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, commit {doc_sections.commit()}, "
        f"{machine()}, torch {build['torch']}. Google Benchmark, one run of each benchmark per "
        "process; each cell is the median over the processes, in microseconds, with their "
        "range (Note [Reading wall times]).",
        "",
        "| benchmark | " + " | ".join(columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for name in times["stock"]:
        cells = []
        for column in columns:
            values = times[column].get(name)
            if not values:
                cells.append("-")
                continue
            cells.append(
                f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("<!-- /wall-time -->")
    return "\n".join(lines) + "\n"


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()}"
