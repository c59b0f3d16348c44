"""What single-threaded backward costs on real GPUs, measured two ways.

    python3 benchmarks/threading_cost.py [--steps N] [--output docs/threading-cost.md]
    python3 benchmarks/threading_cost.py --placements --models M ...
    python3 benchmarks/threading_cost.py --power      (no GPU: a simulation)

Runs on a machine with NVIDIA GPUs, against the torch of this interpreter.
Builds the library into $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR (default
build-threading-cost/), then, for each model whose devices the machine has:

- in the job: IN_JOB_PROCESSES processes train the model for N steps each with the library's
  measurement on (measure_threading(rate=0.5)), which times pairs of
  sampled passes, one with multithreading off and one on (Note [Measuring the
  cost of single-threaded backward]); the estimate is the median over pairs
  of (off - on) / on per process, then over the processes, with the fleet
  report's interval between order statistics of the processes (Note
  [Intervals from order statistics]). Once
  with the default washout (each timed pass follows a pass of its own mode)
  and once without;
- whole-run A/B: the same program, measurement off, run AB_RUNS times with
  multithreading on and as often off for the whole run
  (torch.autograd.set_multithreading_enabled), alternating, timing every
  backward the way the measurement times a sampled one (its devices
  synchronized before and after); the estimate is (median off - median on) /
  median on over the runs' medians, with an interval from the order
  statistics of each mode's runs, since a run's own state moves all its steps
  together;
- the gradients of one step in each mode, compared bit for bit.

With --placements, only the in-job method, once per placement of the
processes: free (this process's CPUs), on one CPU and on two (each child's
affinity set before it starts, so that every thread it starts inherits it).
For each: the estimate and its interval, the spread of the processes' own
values, and where the records say the threads ran (Note [Where the measured
threads ran], torch/csrc/autograd/thread_placement.h).

With --power, no GPU: the power of the comparison, simulated at the
benchmark's sizes for a range of spreads between processes (and runs): how
often a 20-point gap between the methods is found ("differ"), and how often
no gap passes ("agree").

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
# Processes of the in-job method per washout; whole-run A/B: runs per mode,
# alternating, and the steps of each.
# At 8 and 8, the verdict holds at 97.7% (Note [Comparing two methods]).
IN_JOB_PROCESSES = 8
AB_RUNS = 8
# The verdict "agree": both intervals within this many points.
MARGIN = 5.0
AB_STEPS = 100
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


def child_in_job(name, steps, washout):
    import autograd_device_logging as adl  # ahead of torch, as users load it

    adl.measure_threading(rate=0.5, warmup=WARMUP, max_pairs=steps, seed=0, washout=washout)
    step, modules, devices = make_model(name)
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
    print(json.dumps({"pairs": record["pairs"], "discarded": record["discarded"]}))


def child_ab(name, steps, multithreading):
    import autograd_device_logging  # noqa: F401  the library, measurement off

    import torch

    step, modules, devices = make_model(name)
    times = []
    with torch.autograd.set_multithreading_enabled(multithreading):
        for i in range(WARMUP + steps):
            for m in modules:
                m.zero_grad(set_to_none=True)
            loss = step()
            synchronize(devices)
            start = time.perf_counter_ns()
            loss.backward()
            synchronize(devices)
            if i >= WARMUP:
                times.append(time.perf_counter_ns() - start)
    print(json.dumps(times))


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
    "in_job_processes": IN_JOB_PROCESSES,
    "ab_runs": AB_RUNS,
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
        in_job = {}
        for washout in (DEFAULT_WASHOUT, 0):
            processes, discarded, other_classes = [], {}, set()
            for _ in range(CONFIG["in_job_processes"]):
                found = run_child(package, "in-job", name, str(steps), str(washout))
                processes.append([tuple(p) for p in found["pairs"].get(device_class, [])])
                for reason, n in found["discarded"].items():
                    discarded[reason] = discarded.get(reason, 0) + n
                other_classes |= set(found["pairs"]) - {device_class}
            cost = in_job_summary(stats, processes)
            if cost:
                pooled = [p for pairs in processes for p in pairs]
                cost["median_off_ms"] = statistics.median(p[0] for p in pooled) / 1e6
                cost["median_on_ms"] = statistics.median(p[1] for p in pooled) / 1e6
                # Each process's own value (no interval: one unit).
                cost["per_process"] = [
                    in_job_summary(stats, [pairs])["median_percent"] for pairs in processes if pairs
                ]
            in_job[washout] = {
                "cost": cost,
                "discarded": discarded,
                "other_classes": sorted(other_classes),
            }
        times = {True: [], False: []}
        for run in range(CONFIG["ab_runs"]):
            for mode in (True, False) if run % 2 == 0 else (False, True):
                steps_of_run = run_child(
                    package, "ab", name, str(AB_STEPS), "on" if mode else "off"
                )
                times[mode].append(statistics.median(steps_of_run))
        off, on = times[False], times[True]
        ab = 100.0 * (statistics.median(off) - statistics.median(on)) / statistics.median(on)
        interval = stats.ab_interval(off, on)
        grads = run_child(package, "grads", name)
        row = {
            "model": name,
            "description": description,
            "class": device_class,
            "in_job": in_job,
            "ab": {
                "percent": ab,
                "interval": interval,
                "runs_per_mode": len(off),
                "median_off_ms": statistics.median(off) / 1e6,
                "median_on_ms": statistics.median(on) / 1e6,
            },
            "grads": grads,
        }
        for washout, found in in_job.items():
            cost = found["cost"]
            found["verdict"] = stats.compare(cost and cost["interval"], interval, MARGIN)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows, skipped, gpus


# The power simulation: sizes (processes = runs per mode), spreads in points,
# simulated benchmark runs per cell, and what the comparison should reach.
POWER_SIZES = (4, 8, 12, 16, 24, 32)
POWER_SPREADS = (1.0, 2.0, 5.0, 10.0)
POWER_TRIALS = 2000
FINDS_A_GAP = 0.80
PASSES_NO_GAP = 0.90


def simulated_verdicts(stats, rng, gap, spread, size):
    """The share of each verdict of compare() over POWER_TRIALS simulated
    benchmark runs: `size` in-job processes around a true cost of +10%, and
    `size` A/B runs per mode whose true cost is `gap` points away, each with
    `spread` points of process-to-process (run-to-run) variation."""
    import numpy as np

    verdicts = {"agree": 0, "differ": 0, "inconclusive": 0}
    for _ in range(POWER_TRIALS):
        in_job = list(10.0 + rng.normal(0, spread, size=size))
        on = 1e6 * np.exp(rng.normal(0, spread / 100.0, size=size))
        off = 1e6 * (1.1 + gap / 100.0) * np.exp(rng.normal(0, spread / 100.0, size=size))
        verdict, _ = stats.compare(
            stats.median_interval(in_job, "processes"),
            stats.ab_interval(list(off), list(on)),
            MARGIN,
        )
        verdicts[verdict] += 1
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
        f"- {POWER_TRIALS} simulated benchmark runs per cell: N in-job processes around a "
        "true cost of +10% and N whole-run A/B runs per mode, each with the stated spread "
        "between processes (and runs, as a log-normal of the same size); the verdict "
        f"(Note [Comparing two methods]) with a margin of {MARGIN:.0f} points",
        "",
        "| spread between processes | processes = runs per mode | a 20-point gap found "
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
                f"{enough[0]} processes and {enough[0]} runs per mode find a 20-point gap at "
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
                for _ in range(CONFIG["in_job_processes"]):
                    found = run_child(
                        package,
                        "in-job",
                        name,
                        str(steps),
                        str(DEFAULT_WASHOUT),
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
        f"- command: `python3 benchmarks/threading_cost.py --steps {steps}{options()}`",
        f"- in the job: {CONFIG['in_job_processes']} processes of {steps} steps per placement, "
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
    if CONFIG["in_job_processes"] != IN_JOB_PROCESSES:
        out += f" --in-job-processes {CONFIG['in_job_processes']}"
    if CONFIG["ab_runs"] != AB_RUNS:
        out += f" --ab-runs {CONFIG['ab_runs']}"
    if CONFIG["label"]:
        out += f" --label {CONFIG['label']}"
    if CONFIG["placements"]:
        out += " --placements"
    if CONFIG["power"]:
        out += " --power"
    return out


def _interval(interval):
    if not interval:
        return "n/a"
    low, high = interval["percent"]
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


def _verdict(found):
    verdict, level = found["verdict"]
    return f"{'**differ**' if verdict == 'differ' else verdict} ({100 * level:.1f}%)"


def section(rows, skipped, steps):
    import torch

    lines = [
        f"<!-- {marker()} -->",
        f"## Measured {datetime.date.today().isoformat()}",
        "",
        *_machine_lines(torch),
        f"- CPU affinity of every process: {_affinity()}",
        f"- command: `python3 benchmarks/threading_cost.py --steps {steps}{options()}`",
        f"- in the job: {CONFIG['in_job_processes']} processes of {steps} steps, rate 0.5, warm-up {WARMUP}, "
        f"washout {DEFAULT_WASHOUT} "
        "(the default), the interval over the processes; "
        f"whole-run A/B: {CONFIG['ab_runs']} runs per mode, alternating, {AB_STEPS} "
        f"steps each after {WARMUP} warm-up steps, the interval over the runs' medians",
        "",
        "| model | class | in the job: single-threaded backward | interval, coverage | pairs "
        "| median on / off | whole-run A/B | interval, coverage | median on / off "
        f"| the methods (within {MARGIN:.0f} points) | gradients |",
        "| --- | --- | ---: | --- | ---: | --- | ---: | --- | --- | --- | --- |",
    ]
    for r in rows:
        ab, grads = r["ab"], r["grads"]
        found = r["in_job"][DEFAULT_WASHOUT]
        cost = found["cost"]
        lines.append(
            f"| {r['description']} | {r['class']} "
            f"| {fmt(cost['median_percent']) if cost else 'no pairs'} "
            f"| {_interval(cost and cost['interval'])} | {cost['pairs'] if cost else 0} "
            f"| {cost['median_on_ms']:.3f} / {cost['median_off_ms']:.3f} ms "
            f"| {fmt(ab['percent'])} | {_interval(ab['interval'])} "
            f"| {ab['median_on_ms']:.3f} / {ab['median_off_ms']:.3f} ms | {_verdict(found)} "
            f"| {'bit-identical' if grads['identical'] else 'max abs difference %.3g' % grads['max_abs_difference']} |"
        )
    lines += [
        "",
        "In the job without washout (each timed pass may follow a pass of the other mode):",
        "",
        "| model | single-threaded backward | interval, coverage | pairs | median on / off "
        "| against the A/B |",
        "| --- | ---: | --- | ---: | --- | --- |",
    ]
    for r in rows:
        found = r["in_job"][0]
        cost = found["cost"]
        lines.append(
            f"| {r['description']} | {fmt(cost['median_percent']) if cost else 'no pairs'} "
            f"| {_interval(cost and cost['interval'])} | {cost['pairs'] if cost else 0} "
            f"| {cost['median_on_ms']:.3f} / {cost['median_off_ms']:.3f} ms | {_verdict(found)} |"
        )
    lines += [
        "",
        "Each process of the in-job method alone (washout " f"{DEFAULT_WASHOUT}): its median pair",
        "",
        "| model | per process: single-threaded backward |",
        "| --- | --- |",
    ]
    for r in rows:
        cost = r["in_job"][DEFAULT_WASHOUT]["cost"]
        cells = [fmt(p) for p in (cost or {}).get("per_process", [])]
        lines.append(f"| {r['description']} | {'; '.join(cells) or 'no pairs'} |")
    lines.append("")
    for r in rows:
        for washout, found in r["in_job"].items():
            if found["discarded"] or found["other_classes"]:
                lines.append(
                    f"- {r['model']}, washout {washout}: pairs discarded "
                    f"{found['discarded'] or 'none'}; pairs of other classes: "
                    f"{found['other_classes'] or 'none'}"
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
by the library inside the job (pairs of sampled passes, `measure_threading()`)
and by a whole-run A/B of the same program. Positive: single-threaded is
slower.

Both methods take the process (the run) as the sample: a process's state (the
cores its threads run on, the GPU's clocks, its allocator) moves all of its
passes together, so an interval over one process's passes says nothing of the
next run. The in-job estimate is the median over processes of each one's
median pair, with the fleet report's interval between order statistics of the
processes and its exact coverage (Notes [What an interval is over] and
[Intervals from order statistics] in
`python/autograd_device_logging/cost_statistics.py`); the A/B interval comes
from the order statistics of each mode's runs. The verdict on the two methods
is "differ", "agree" (both intervals within the margin) or "inconclusive",
at the level both intervals hold together (Note [Comparing two methods]):
overlapping intervals are not agreement. The second table is the in-job
method without the washout: there a timed pass may follow a pass of the other
mode, which a whole run never does. The sections on where the threads ran
(`--placements`) run the in-job method free, on one CPU and on two, and take
each process's placement from its record (Note [Where the measured threads
ran]).

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
    parser.add_argument("--in-job-processes", type=int, default=IN_JOB_PROCESSES)
    parser.add_argument("--ab-runs", type=int, default=AB_RUNS, help="runs per mode")
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
        in_job_processes=args.in_job_processes,
        ab_runs=args.ab_runs,
        label=args.label,
        placements=args.placements,
        power=args.power,
    )
    if args.child:
        kind, name, *rest = args.child
        if kind == "in-job":
            child_in_job(name, int(rest[0]), int(rest[1]))
        elif kind == "ab":
            child_ab(name, int(rest[0]), rest[1] == "on")
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
