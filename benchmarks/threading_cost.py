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
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import doc_sections
from threading_cost_models import MODELS, make_model, synchronize
from threading_cost_sections import (
    AB_BLOCK,
    AB_ROUNDS,
    COMPARISON_PROCESSES,
    CONFIG,
    DEFAULT_WASHOUT,
    MARGIN,
    WARMUP,
    cost_statistics,
    placement_section,
    power_section,
    section,
    write,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_library():
    return doc_sections.build_library(
        "build-threading-cost",
        "-DAUTOGRAD_DEVICE_LOGGING_BUILD_TESTS=OFF -DAUTOGRAD_DEVICE_LOGGING_BUILD_BENCHMARKS=OFF",
    )


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
