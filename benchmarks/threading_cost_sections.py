"""What benchmarks/threading_cost.py measures with, and the sections of
docs/threading-cost.md it writes: the run's constants and options, the
measured sections and the comparison's simulated power."""

import datetime
import importlib.util
import os
import platform
import statistics

import doc_sections

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "threading-cost"
WARMUP = 20
# Processes per model; each runs both methods (Note [Comparing two methods]):
# at 16, a 20-point gap between them is found and no gap passed where their
# differences spread by up to 5 points (test/test_cost_statistics.py, and
# --power by spread).
COMPARISON_PROCESSES = 16
# The verdict's margin in points: half the gap the comparison must find.
MARGIN = 10.0
# The same-process A/B: rounds of one block per mode, alternating which mode
# goes first, and the passes of a block; the first pass of each block is
# not timed (the measurement's washout).
AB_ROUNDS = 8
AB_BLOCK = 26
# The measurement's default (threading_measurement.Settings.washout).
DEFAULT_WASHOUT = 1


def fmt(value):
    return f"{value:+.1f}%"


CONFIG = {
    "processes": COMPARISON_PROCESSES,
    "models": None,
    "label": None,
    "placements": False,
    "power": False,
}


def marker():
    """The section's marker: one for the full run, one per subset of models."""
    models = CONFIG["models"]
    name = MARKER if not models else MARKER + "-" + "-".join(models)
    if CONFIG["placements"]:
        name += "-placements"
    if CONFIG["power"]:
        name = MARKER + "-power"
    return name + ("-" + CONFIG["label"] if CONFIG["label"] else "")


def cost_statistics():
    """The report's statistics, without importing the package (which would
    load the library into this process)."""
    spec = importlib.util.spec_from_file_location(
        "adl_cost_statistics",
        os.path.join(REPO, "python", "autograd_device_logging", "cost_statistics.py"),
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The power simulation: processes per model, spreads of the processes'
# differences between the methods in points, simulated benchmark runs per
# cell, and what the comparison should reach.
POWER_SIZES = (6, 8, 12, 16, 24, 32)
POWER_SPREADS = (1.0, 2.0, 5.0, 8.0, 10.0)
POWER_TRIALS = 2000
FINDS_A_GAP = 0.80
PASSES_NO_GAP = 0.90


def simulated_verdicts(stats, rng, gap, spread, size):
    """The share of each verdict of compare_methods() over POWER_TRIALS
    simulated benchmark runs of `size` processes whose differences between
    the methods spread normally by `spread` points around `gap`."""
    verdicts = {"agree": 0, "differ": 0, "inconclusive": 0}
    for _ in range(POWER_TRIALS):
        differences = list(gap + rng.normal(0, spread, size=size))
        verdicts[stats.compare_methods(differences, MARGIN)["verdict"]] += 1
    return {v: n / POWER_TRIALS for v, n in verdicts.items()}


def _points(spread):
    return f"{spread:g} point{'' if spread == 1 else 's'}"


def power_section():
    import numpy as np

    stats = cost_statistics()
    rng = np.random.default_rng(0)
    rows = []
    for spread in POWER_SPREADS:
        for size in POWER_SIZES:
            found = simulated_verdicts(stats, rng, 20.0, spread, size)["differ"]
            passed = simulated_verdicts(stats, rng, 0.0, spread, size)["agree"]
            rows.append((spread, size, found, passed))
    lines = [
        f"<!-- {marker()} -->",
        f"## The comparison's power, simulated {datetime.date.today().isoformat()}",
        "",
        f"- command: `python3 benchmarks/threading_cost.py{options()}` (no GPU), commit "
        f"{doc_sections.commit()}, numpy {np.__version__}",
        f"- {POWER_TRIALS} simulated benchmark runs per cell: N processes, each one's "
        "difference between the methods normal with the stated spread around the true gap; "
        f"the verdict (Note [Comparing two methods]) with a margin of {MARGIN:.0f} points; "
        f"the benchmark runs {COMPARISON_PROCESSES} processes per model",
        "",
        "| spread of the differences | processes | a 20-point gap found "
        "(differ) | no gap passes (agree) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for spread, size, found, passed in rows:
        lines.append(f"| {_points(spread)} | {size} | {100 * found:.0f}% | {100 * passed:.0f}% |")
    lines.append("")
    for spread in POWER_SPREADS:
        enough = [
            size
            for s, size, found, passed in rows
            if s == spread and found >= FINDS_A_GAP and passed >= PASSES_NO_GAP
        ]
        lines.append(
            f"- spread {_points(spread)}: "
            + (
                f"{enough[0]} processes find a 20-point gap at "
                f"least {100 * FINDS_A_GAP:.0f}% of the time and pass no gap at least "
                f"{100 * PASSES_NO_GAP:.0f}%."
                if enough
                else f"no size up to {POWER_SIZES[-1]} reaches both "
                f"({100 * FINDS_A_GAP:.0f}% and {100 * PASSES_NO_GAP:.0f}%)."
            )
        )
    lines.append(f"<!-- /{marker()} -->")
    return "\n".join(lines) + "\n"


def placement_section(rows, steps):
    import torch

    lines = [
        f"<!-- {marker()} -->",
        f"## Where the threads ran, measured {datetime.date.today().isoformat()}",
        "",
        *_machine_lines(torch),
        f"- command: `python3 benchmarks/threading_cost.py --steps {steps}{options()}`, "
        f"commit {doc_sections.commit()}",
        f"- in the job: {CONFIG['processes']} processes of {steps} steps per placement, "
        f"rate 0.5, warm-up {WARMUP}, washout {DEFAULT_WASHOUT}; free: {_affinity()}",
        "",
        "| model | placement | the threads' affinity (records) | single-threaded backward | interval, coverage "
        "| processes: lowest, highest | spread | CPUs each thread was seen on (records) |",
        "| --- | --- | --- | ---: | --- | --- | ---: | --- |",
    ]
    for r in rows:
        cost, values = r["cost"], r["values"]
        where = "; ".join(f"{t}: {','.join(map(str, c))}" for t, c in sorted(r["seen"].items()))
        lines.append(
            f"| {r['description']} | {r['placement']}"
            + (f" ({','.join(map(str, sorted(r['cpus'])))})" if r["cpus"] else "")
            + f" | {'; '.join(r['keys'])} "
            f"| {fmt(cost['median_percent']) if cost else 'no pairs'} "
            f"| {_interval(cost and cost['interval'])} "
            f"| {fmt(min(values))}, {fmt(max(values))} | {max(values) - min(values):.1f} points "
            f"| {where} |"
        )
    lines.append("")
    for model in dict.fromkeys(r["model"] for r in rows):
        of = {r["placement"]: r for r in rows if r["model"] == model}
        if "free" not in of or "one CPU" not in of:
            continue
        free, one = (max(of[p]["values"]) - min(of[p]["values"]) for p in ("free", "one CPU"))
        lines.append(
            f"- {model}: the processes' values spread over {free:.1f} points free and "
            f"{one:.1f} on one CPU: "
            + (
                "pinning narrowed the spread, as the figures this section re-measures said "
                "(where the threads run moves the estimate)."
                if one < free / 2
                else "pinning did not halve the spread: these figures do not confirm that "
                "where the threads run is what moves the estimate."
            )
        )
    lines.append(f"<!-- /{marker()} -->")
    return "\n".join(lines) + "\n"


def options():
    out = ""
    if CONFIG["models"]:
        out += " --models " + " ".join(CONFIG["models"])
    if CONFIG["processes"] != COMPARISON_PROCESSES:
        out += f" --processes {CONFIG['processes']}"
    if CONFIG["label"]:
        out += f" --label {CONFIG['label']}"
    if CONFIG["placements"]:
        out += " --placements"
    if CONFIG["power"]:
        out += " --power"
    return out


def _interval(interval, points=False):
    """An interval and its coverage; `points` for a difference between two
    percentages."""
    if not interval:
        return "n/a"
    low, high = interval["percent"]
    if points:
        return f"[{low:+.1f}, {high:+.1f}] points, {100 * interval['level']:.1f}%"
    return f"[{fmt(low)}, {fmt(high)}] {100 * interval['level']:.1f}%"


def _affinity():
    """The cores this process (and the children it starts) may run on."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) == os.cpu_count():
        return f"all {len(cores)} cores"
    return f"{len(cores)} of {os.cpu_count()} cores ({', '.join(map(str, cores))})"


def _machine_lines(torch):
    """A section's lines on the machine, torch and Python it ran on."""
    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    return [
        f"- machine: {torch.cuda.device_count()} x {', '.join(names)}, {os.cpu_count()} CPU cores, "
        f"{platform.machine()}",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda}), Python {platform.python_version()}",
    ]


def _verdict(comparison):
    verdict = comparison["verdict"]
    shown = f"**{verdict}**" if verdict == "differ" else verdict
    return f"{shown} ({100 * comparison['level']:.1f}%)"


def _points_or_na(value):
    return "n/a" if value is None else f"{value:+.1f} points"


def _values(values):
    return "; ".join(fmt(v) for v in values) or "no pairs"


def section(rows, skipped, steps):
    import torch

    lines = [
        f"<!-- {marker()} -->",
        f"## Measured {datetime.date.today().isoformat()}",
        "",
        *_machine_lines(torch),
        f"- CPU affinity of every process: {_affinity()}",
        f"- command: `python3 benchmarks/threading_cost.py --steps {steps}{options()}`, "
        f"commit {doc_sections.commit()}",
        f"- per model, {CONFIG['processes']} processes, each running both methods: in the job, "
        f"{steps} steps, rate 0.5, warm-up {WARMUP}, washout {DEFAULT_WASHOUT} (the "
        f"defaults); then the same-process A/B, {AB_ROUNDS} rounds of a block of "
        f"{AB_BLOCK} passes per mode, alternating which goes first, the first pass of each "
        "block untimed. Each method's value in a process is the median over its pairs of "
        "(off - on) / on; its estimate, the median over the processes, with the interval "
        "over the processes",
        f"- the methods: each process's difference (in the job minus A/B), the median "
        f"difference with its interval over the processes, and the equivalence verdict with "
        f"a margin of {MARGIN:.0f} points (Note [Comparing two methods])",
        "",
        "| model | class | in the job: single-threaded backward | interval, coverage | pairs "
        "| median on / off | same-process A/B | interval, coverage | median on / off "
        "| in the job minus A/B | interval, coverage | the methods | gradients |",
        "| --- | --- | ---: | --- | ---: | --- | ---: | --- | --- | ---: | --- | --- | --- |",
    ]

    def ms(found):
        if found["median_on_ms"] is None:
            return "n/a"
        return f"{found['median_on_ms']:.3f} / {found['median_off_ms']:.3f} ms"

    for r in rows:
        in_job, ab, comparison, grads = r["in_job"], r["ab"], r["comparison"], r["grads"]
        lines.append(
            f"| {r['description']} | {r['class']} "
            f"| {fmt(in_job['median']) if in_job['values'] else 'no pairs'} "
            f"| {_interval(in_job['interval'])} | {in_job['pairs']} | {ms(in_job)} "
            f"| {fmt(ab['median']) if ab['values'] else 'no pairs'} "
            f"| {_interval(ab['interval'])} | {ms(ab)} "
            f"| {_points_or_na(comparison['median'])} "
            f"| {_interval(comparison['interval'], points=True)} | {_verdict(comparison)} "
            f"| {'bit-identical' if grads['identical'] else 'max abs difference %.3g' % grads['max_abs_difference']} |"
        )
    lines += [
        "",
        "Each process, in the job / same-process A/B:",
        "",
        "| model | in the job | same-process A/B | spread of the differences |",
        "| --- | --- | --- | ---: |",
    ]
    for r in rows:
        differences = [a - b for a, b in zip(r["in_job"]["values"], r["ab"]["values"])]
        spread = statistics.stdev(differences) if len(differences) > 1 else float("nan")
        lines.append(
            f"| {r['description']} | {_values(r['in_job']['values'])} "
            f"| {_values(r['ab']['values'])} | {spread:.1f} points (SD) |"
        )
    lines.append("")
    for r in rows:
        if r["discarded"] or r["other_classes"]:
            lines.append(
                f"- {r['model']}: pairs discarded {r['discarded'] or 'none'}; pairs of other "
                f"classes: {r['other_classes'] or 'none'}"
            )
    for s in skipped:
        lines.append(f"- not measured: {s}")
    lines.append(f"<!-- /{marker()} -->")
    return "\n".join(lines) + "\n"


HEADER = """# The cost of single-threaded backward

Written by `benchmarks/threading_cost.py` on a machine with NVIDIA GPUs: how
much slower each model's backward pass is with multithreading off
(`torch.autograd.set_multithreading_enabled(False)`: every node on the calling
thread) than with it on (each device's nodes on its device thread), measured
twice in each process: by the library inside the job (pairs of sampled
passes, `measure_threading()`), then by an A/B of blocks of passes in each
mode. Positive: single-threaded is slower.

Both methods give a process the same kind of value, the median over its
pairs of (off - on) / on, and take the process as the sample: a process's
state (the cores its threads run on, the GPU's clocks, its allocator) moves
all of its passes together, so an interval over one process's passes says
nothing of the next run. Each estimate is the median over processes, with
the fleet report's interval between order statistics of the processes and
its exact coverage (Notes [What an interval is over] and [Intervals from
order statistics] in `python/autograd_device_logging/cost_statistics.py`).
The methods are compared through each process's difference between them:
the median difference, its interval, and an equivalence verdict, "agree"
(the interval within the margin), "differ" (wholly beyond it) or
"inconclusive" (Note [Comparing two methods]). The power section simulates
how often that verdict finds a 20-point gap and passes none. The sections
on where the threads ran (`--placements`) run the in-job method free, on one
CPU and on two, and take each process's placement from its record (Note
[Where the measured threads ran]).

"""


def write(output, text):
    doc_sections.replace_section(output, marker(), text, HEADER)
