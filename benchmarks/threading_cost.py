"""What single-threaded backward costs on real GPUs, measured two ways.

    python3 benchmarks/threading_cost.py [--steps N] [--output docs/threading-cost.md]
    python3 benchmarks/threading_cost.py --placements --models M ...
    python3 benchmarks/threading_cost.py --power      (no GPU: a simulation)

Runs on a machine with NVIDIA GPUs, against the torch of this interpreter.
Builds the library into $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR (default
build-threading-cost/), then, for each model whose devices the machine has:

- COMPARISON_PROCESSES processes, each running both methods: first N steps with the
  library's measurement on (measure_threading(rate=0.5)), which times pairs
  of sampled passes, one with multithreading off and one on (Note [Measuring
  the cost of single-threaded backward]); then, the measurement stopped, a
  same-process A/B: AB_ROUNDS rounds of a block of AB_BLOCK passes with
  multithreading on and one off (torch.autograd.set_multithreading_enabled),
  alternating which goes first, each pass timed the way the measurement
  times a sampled one (its devices synchronized before and after), the k-th
  timed pass of the off block paired with the k-th of the on block. Each
  method's value in a process is the median over its pairs of (off - on) /
  on (process_value()), so both estimate the same quantity; each estimate is
  the median over the processes, with the fleet report's interval between
  order statistics of the processes (Note [Intervals from order
  statistics]);
- the methods compared through each process's difference between them
  (Note [Comparing two methods]);
- the gradients of one step in each mode, compared bit for bit.

With --placements, only the in-job method, once per placement of the
processes: free (this process's CPUs), on one CPU and on two (each child's
affinity set before it starts, so that every thread it starts inherits it).
For each: the estimate and its interval, the spread of the processes' own
values, and where the records say the threads ran (Note [Where the measured
threads ran], torch/csrc/autograd/thread_placement.h).

With --power, no GPU: the power of the comparison, simulated at several
sizes for a range of spreads of the processes' differences: how often a
20-point gap between the methods is found ("differ"), and how often no gap
passes ("agree").

The verdict on the two methods is "differ", "agree" (within MARGIN points) or
"inconclusive", at a stated level (Note [Comparing two methods] in
python/autograd_device_logging/cost_statistics.py). The section it writes goes
between the threading-cost markers of the output file.
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

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


def build_library():
    return doc_sections.build_library(
        "build-threading-cost",
        "-DAUTOGRAD_DEVICE_LOGGING_BUILD_TESTS=OFF -DAUTOGRAD_DEVICE_LOGGING_BUILD_BENCHMARKS=OFF",
    )


# -- the models (run in the children) -----------------------------------------

MODELS = {
    "single_accelerator": (1, "MLP, 24 Linear(1024)+ReLU blocks, batch 256, cuda:0"),
    "single_accelerator_launch_bound": (
        1,
        "launch-bound MLP, 200 Linear(64)+ReLU blocks, batch 32, cuda:0",
    ),
    "accelerator_cpu": (
        1,
        "CPU EmbeddingBag(50000 x 128, 64 bags of 64) feeding a 6-block MLP head on cuda:0",
    ),
    "multi_accelerator": (2, "MLP, 24 Linear(1024)+ReLU blocks split over cuda:0 and cuda:1"),
}


def make_model(name):
    """(step, devices): step() runs forward and returns the loss."""
    import torch

    torch.manual_seed(0)

    def blocks(n, width, devices):
        out = []
        for i in range(n):
            device = devices[i * len(devices) // n]
            layer = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
            out.append(layer.to(device))
        return out

    def run(layers, x):
        for layer in layers:
            x = layer(x.to(next(layer.parameters()).device))
        return x

    if name in ("single_accelerator", "multi_accelerator"):
        devices = ["cuda:0"] if name == "single_accelerator" else ["cuda:0", "cuda:1"]
        layers = blocks(24, 1024, devices)
        x = torch.randn(256, 1024, device="cuda:0")
        return (lambda: run(layers, x).pow(2).mean()), layers, devices
    if name == "single_accelerator_launch_bound":
        layers = blocks(200, 64, ["cuda:0"])
        x = torch.randn(32, 64, device="cuda:0")
        return (lambda: run(layers, x).pow(2).mean()), layers, ["cuda:0"]
    if name == "accelerator_cpu":
        embedding = torch.nn.EmbeddingBag(50_000, 128, mode="sum")
        head = [torch.nn.Linear(128, 1024).to("cuda:0")] + blocks(6, 1024, ["cuda:0"])
        indices = torch.randint(0, 50_000, (64 * 64,))
        offsets = torch.arange(0, 64 * 64, 64)

        def step():
            return run(head, embedding(indices, offsets).to("cuda:0")).pow(2).mean()

        return step, [embedding, *head], ["cuda:0"]
    raise ValueError(name)


def synchronize(devices):
    import torch

    for device in devices:
        torch.cuda.synchronize(device)


def child_in_job(name, steps, washout, ab_rounds):
    """One process: `steps` steps with the in-job measurement on, then (with
    ab_rounds) the same-process A/B; prints the pairs of each."""
    import autograd_device_logging as adl  # ahead of torch, as users load it

    import torch

    adl.measure_threading(rate=0.5, warmup=WARMUP, max_pairs=steps, seed=0, washout=washout)
    step, modules, devices = make_model(name)

    def timed_step():
        for m in modules:
            m.zero_grad(set_to_none=True)
        loss = step()
        synchronize(devices)
        start = time.perf_counter_ns()
        loss.backward()
        synchronize(devices)
        return time.perf_counter_ns() - start

    for _ in range(steps):
        for m in modules:
            m.zero_grad(set_to_none=True)
        step().backward()
    synchronize(devices)
    status = adl.status()
    assert status.active and not status.disabled_reason, status
    record = adl.threading_measurement.sampler().record_fields()
    if os.environ.get("AUTOGRAD_DEVICE_LOGGING_REPORT_DIR"):
        adl.write_process_record()
    adl.threading_measurement.stop()
    ab_pairs = []
    for r in range(ab_rounds):
        times = {}
        for mode in (True, False) if r % 2 == 0 else (False, True):
            with torch.autograd.set_multithreading_enabled(mode):
                times[mode] = [timed_step() for _ in range(AB_BLOCK)][1:]
        ab_pairs += list(zip(times[False], times[True]))
    print(json.dumps({"pairs": record["pairs"], "discarded": record["discarded"], "ab": ab_pairs}))


def child_grads(name):
    import autograd_device_logging  # noqa: F401

    import torch

    step, modules, devices = make_model(name)
    grads = {}
    for mode in (True, False):
        for m in modules:
            m.zero_grad(set_to_none=True)
        with torch.autograd.set_multithreading_enabled(mode):
            step().backward()
        synchronize(devices)
        grads[mode] = [p.grad.detach().cpu() for m in modules for p in m.parameters()]
    same = all(torch.equal(a, b) for a, b in zip(grads[True], grads[False]))
    diff = max((a - b).abs().max().item() for a, b in zip(grads[True], grads[False]))
    print(json.dumps({"identical": same, "max_abs_difference": diff}))


# -- the parent ---------------------------------------------------------------


def run_child(package, *args, cpus=None, report_dir=None):
    """The child's last line, as JSON; the child on `cpus` where given (set
    before it starts, so every thread it starts inherits it), writing its
    record into `report_dir` where given."""
    env = dict(os.environ, PYTHONPATH=package + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("AUTOGRAD_DEVICE_LOGGING_REPORT_DIR", None)
    if report_dir:
        env["AUTOGRAD_DEVICE_LOGGING_REPORT_DIR"] = report_dir
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)),
    )
    if out.returncode != 0:
        sys.exit(f"child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def in_job_summary(stats, processes):
    """The fleet report's summary of a job of these processes' pairs."""
    cost = stats.ClassCost()
    for pairs in processes:
        if pairs:
            cost.add((*stats.process_value(pairs), len(pairs)), is_rank=False)
    return cost.summary() if cost.pairs else None


def method_summary(stats, processes):
    """One method's figures from each process's pairs (off, on): each
    process's value (process_value()), their median and its interval over
    the processes, and the median pass of each mode over all pairs."""
    values = [stats.process_value(pairs)[0] for pairs in processes]
    pooled = [pair for pairs in processes for pair in pairs]
    return {
        "values": values,
        "median": stats.median(values) if values else None,
        "interval": stats.median_interval(values, "processes"),
        "pairs": len(pooled),
        "median_on_ms": statistics.median(p[1] for p in pooled) / 1e6 if pooled else None,
        "median_off_ms": statistics.median(p[0] for p in pooled) / 1e6 if pooled else None,
    }


def measure(package, steps):
    stats = cost_statistics()
    import torch

    gpus = torch.cuda.device_count()
    rows, skipped = [], []
    for name, (needed, description) in MODELS.items():
        if CONFIG["models"] and name not in CONFIG["models"]:
            continue
        if gpus < needed:
            skipped.append(
                f"{name} ({description}): needs {needed} CUDA devices, this machine has {gpus}"
            )
            continue
        print(f"== {name}: {description}", file=sys.stderr)
        device_class = name.replace("_launch_bound", "")
        processes, discarded, other_classes = [], {}, set()
        for _ in range(CONFIG["processes"]):
            found = run_child(
                package, "in-job", name, str(steps), str(DEFAULT_WASHOUT), str(AB_ROUNDS)
            )
            processes.append(
                ([tuple(p) for p in found["pairs"].get(device_class, [])], found["ab"])
            )
            for reason, n in found["discarded"].items():
                discarded[reason] = discarded.get(reason, 0) + n
            other_classes |= set(found["pairs"]) - {device_class}
        measured = [(in_job, ab) for in_job, ab in processes if in_job and ab]
        in_job = method_summary(stats, [p for p, _ in measured])
        ab = method_summary(stats, [p for _, p in measured])
        row = {
            "model": name,
            "description": description,
            "class": device_class,
            "processes": len(processes),
            "in_job": in_job,
            "ab": ab,
            "comparison": stats.compare_methods(
                [a - b for a, b in zip(in_job["values"], ab["values"])], MARGIN
            ),
            "discarded": discarded,
            "other_classes": sorted(other_classes),
            "grads": run_child(package, "grads", name),
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows, skipped, gpus


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


def placements():
    """(name, CPUs or None for this process's own) of each placement."""
    cores = sorted(os.sched_getaffinity(0))
    out = [("free", None), ("one CPU", {cores[-1]})]
    if len(cores) > 2:
        out.append(("two CPUs", set(cores[-2:])))
    return out


def measure_placements(package, steps):
    """Per model and placement, the in-job estimate and where the records
    say the threads ran."""
    stats = cost_statistics()
    rows = []
    for name, (needed, description) in MODELS.items():
        if name not in (CONFIG["models"] or ["single_accelerator_launch_bound"]):
            continue
        device_class = name.replace("_launch_bound", "")
        for placement, cpus in placements():
            print(f"== {name}, {placement}", file=sys.stderr)
            processes, seen = [], {}
            with tempfile.TemporaryDirectory() as records:
                for _ in range(CONFIG["processes"]):
                    found = run_child(
                        package,
                        "in-job",
                        name,
                        str(steps),
                        str(DEFAULT_WASHOUT),
                        "0",
                        cpus=cpus,
                        report_dir=records,
                    )
                    processes.append([tuple(p) for p in found["pairs"].get(device_class, [])])
                keys = set()
                for file_name in os.listdir(records):
                    if not file_name.endswith(".json"):
                        continue
                    with open(os.path.join(records, file_name)) as f:
                        where = json.load(f)["threading_cost"]["placement"]
                    for thread, found in where["threads"].items():
                        seen.setdefault(thread, set()).update(cpu_set(found["ran_on"]))
                    allowed = set()
                    for thread in where["threads"].values():
                        allowed |= cpu_set(thread["affinity"])
                    keys.add(
                        ",".join(map(str, sorted(allowed)))
                        + (f", quota {where['cpu_quota']:g}" if where["cpu_quota"] else "")
                    )
            cost = in_job_summary(stats, processes)
            values = [in_job_summary(stats, [p])["median_percent"] for p in processes if p]
            rows.append(
                {
                    "model": name,
                    "description": description,
                    "placement": placement,
                    "cpus": cpus,
                    "cost": cost,
                    "values": values,
                    "seen": {t: sorted(c) for t, c in seen.items()},
                    "keys": sorted(keys),
                }
            )
            print(json.dumps(rows[-1], default=sorted), file=sys.stderr)
    return rows


def cpu_set(text):
    out = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="steps of the in-job run")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "threading-cost.md"))
    parser.add_argument(
        "--models",
        nargs="+",
        choices=sorted(MODELS),
        help="only these models, into a section of their own",
    )
    parser.add_argument(
        "--processes", type=int, default=COMPARISON_PROCESSES, help="processes per model"
    )
    parser.add_argument(
        "--label", help="a name for the section, for a run under other conditions (taskset -c 5)"
    )
    parser.add_argument(
        "--placements",
        action="store_true",
        help="the in-job method free, on one CPU and on two, into a section of its own",
    )
    parser.add_argument(
        "--power",
        action="store_true",
        help="no GPU: the comparison's power, simulated, into a section of its own",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    CONFIG.update(
        models=args.models,
        processes=args.processes,
        label=args.label,
        placements=args.placements,
        power=args.power,
    )
    if args.child:
        kind, name, *rest = args.child
        if kind == "in-job":
            child_in_job(name, int(rest[0]), int(rest[1]), int(rest[2]))
        else:
            child_grads(name)
        return
    if args.power:
        write(args.output, power_section())
        print(open(args.output).read())
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    package = build_library()
    if args.placements:
        write(args.output, placement_section(measure_placements(package, args.steps), args.steps))
    else:
        rows, skipped, _ = measure(package, args.steps)
        write(args.output, section(rows, skipped, args.steps))
    print(open(args.output).read())


if __name__ == "__main__":
    main()
