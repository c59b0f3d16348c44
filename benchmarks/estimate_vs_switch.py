"""What the in-job estimate estimates, beside what switching the whole process
does, on the launch-bound MLP: which of the differences between the two come
from the method (alternating pairs, washout) and which from the process.

    python3 benchmarks/estimate_vs_switch.py run --out estimate.json
    python3 benchmarks/estimate_vs_switch.py write run1.json run2.json ... [--output docs/threading-cost.md]

Runs on a machine with NVIDIA GPUs. In rounds whose order rotates, fresh
processes of the launch-bound MLP (benchmarks/calling_thread.py's mlp48), each
timing STEPS steps after its warm-up:

- stock / switch: torch alone, multithreaded, or with
  torch.autograd.set_multithreading_enabled(False) for the whole process (the
  truth the estimate is held to: their medians over processes);
- switch after multithreaded steps: a process that runs 100 steps
  multithreaded, then turns multithreading off for good and times only the
  steps after that: the switch, in a process whose device thread has run
  passes;
- blocks: one process, torch alone, that alternates blocks of BLOCK steps
  multithreaded and BLOCK steps with multithreading off, and gives the
  difference of its two medians: the switch's effect with the process held
  fixed (its placement, its allocator, its device thread);
- estimate, washout W: the library's in-job measurement
  (AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING=1, rate 0.25) with W unmeasured
  passes in each mode before each timed one (Note [Measuring the cost of
  single-threaded backward]): W=1 is the default; a long washout makes each
  timed pass follow a run of passes in its own mode, as in a whole process.

If blocks agree with the estimates, the method measures what the process
does, and the spread of the switch over processes is the processes'; if
blocks agree with the switch and not with the estimates, the alternation is
what the estimate misses.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "estimate-vs-switch"
CALLING_THREAD = os.path.join(REPO, "benchmarks", "calling_thread.py")
MODEL = "mlp48"
WASHOUTS = (1, 16)
BLOCK = 25


AFTER = "switch after multithreaded steps"
# Multithreaded steps before the switch, in AFTER.
MULTITHREADED_FIRST = 100


def modes():
    return ["stock", "switch", AFTER, "blocks"] + [f"estimate, washout {w}" for w in WASHOUTS]


def after_child(args):
    """One process that runs multithreaded first, then switches off for good
    and times only what follows: does a process whose device thread has run
    passes get the switch's whole gain?"""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import calling_thread

    import torch

    model, x, loss_of = calling_thread.build(MODEL, "cuda:0")
    backward = []
    first = args.warmup + MULTITHREADED_FIRST
    for i in range(first + args.warmup + args.steps):
        torch.autograd.set_multithreading_enabled(i < first)
        for p in model.parameters():
            p.grad = None
        loss = loss_of(model(x))
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        if i >= first + args.warmup:
            backward.append((time.perf_counter() - t1) * 1e3)
    print("RESULT " + json.dumps({"backward_ms": statistics.median(backward)}))
    sys.stdout.flush()
    os._exit(0)  # Note [Children skip interpreter finalization]


def blocks_child(args):
    """One process that alternates the two modes in blocks; one JSON line."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import calling_thread

    import torch

    model, x, loss_of = calling_thread.build(MODEL, "cuda:0")
    times = {True: [], False: []}
    for i in range(args.warmup + args.steps):
        multithreaded = (i // BLOCK) % 2 == 0
        torch.autograd.set_multithreading_enabled(multithreaded)
        for p in model.parameters():
            p.grad = None
        loss = loss_of(model(x))
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        # The first pass of each block is its washout.
        if i >= args.warmup and i % BLOCK != 0:
            times[multithreaded].append((t2 - t1) * 1e3)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print("RESULT " + json.dumps({"percent": (off - on) / on * 100, "on_ms": on, "off_ms": off}))
    sys.stdout.flush()
    os._exit(0)  # Note [Children skip interpreter finalization]


def run(args):
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import doc_sections

    import torch

    package = doc_sections.build_library(
        "build-calling-thread", "-DAUTOGRAD_DEVICE_LOGGING_BUILD_TESTS=OFF"
    )
    meta = {
        "commit": doc_sections.commit(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "processes": args.processes,
        "steps": args.steps,
    }
    results = []
    order = modes()
    for round_ in range(args.processes):
        shift = round_ % len(order)
        for mode in order[shift:] + order[:shift]:
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith("AUTOGRAD_DEVICE_LOGGING_")
                or k == "AUTOGRAD_DEVICE_LOGGING_BUILD_DIR"
            }
            steps = ["--steps", str(args.steps)]
            if mode == "blocks":
                command = [sys.executable, __file__, "child"] + steps
            elif mode == AFTER:
                command = [sys.executable, __file__, "child", "--after"] + steps
            elif mode.startswith("estimate"):
                env["PYTHONPATH"] = package + os.pathsep + env.get("PYTHONPATH", "")
                env["AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING"] = "1"
                env["AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE"] = "0.25"
                env["AUTOGRAD_DEVICE_LOGGING_MEASURE_WASHOUT"] = mode.rsplit(" ", 1)[1]
                command = [sys.executable, CALLING_THREAD, "child", MODEL, "in-job estimate"]
                command += steps
            else:
                command = [sys.executable, CALLING_THREAD, "child", MODEL, mode] + steps
            proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                sys.exit(f"{mode}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
            result = dict(json.loads(lines[0][7:]), mode=mode, round=round_)
            results.append(result)
            print(json.dumps(result), flush=True)
            with open(args.out + ".tmp", "w") as f:
                json.dump({"meta": meta, "results": results}, f, indent=1)
            os.replace(args.out + ".tmp", args.out)


def rows_of(part):
    """(method, median, per-process values, pairs per process) of one run."""
    by = {}
    for r in part["results"]:
        by.setdefault(r["mode"], []).append(r)
    stock = statistics.median(r["backward_ms"] for r in by["stock"])
    rows = []
    for mode, name in (
        ("switch", "switch: whole processes, multithreading off"),
        (AFTER, f"switch after {MULTITHREADED_FIRST} multithreaded steps"),
    ):
        values = [(r["backward_ms"] / stock - 1) * 100 for r in by.get(mode, [])]
        median = statistics.median(r["backward_ms"] for r in by[mode]) / stock * 100 - 100
        rows.append((name + ", against stock's median", median, values, ""))
    values = [r["percent"] for r in by["blocks"]]
    rows.append(
        (
            f"blocks: one process, {BLOCK} steps in each mode in turn",
            statistics.median(values),
            values,
            "",
        )
    )
    for w in WASHOUTS:
        got = by.get(f"estimate, washout {w}", [])
        values = [r["estimate_percent"] for r in got if r["estimate_percent"] is not None]
        rows.append(
            (
                f"in-job estimate, washout {w}" + (" (the default)" if w == 1 else ""),
                statistics.median(values),
                values,
                ", ".join(str(r["pairs"]) for r in got),
            )
        )
    return rows


def write(args):
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import doc_sections

    parts = []
    for path in args.results:
        with open(path) as f:
            parts.append(json.load(f))
    meta = parts[0]["meta"]
    lines = [
        f"<!-- {MARKER} -->",
        "## The in-job estimate beside the whole-process switch, and what moves them",
        "",
        "Written by `python3 benchmarks/estimate_vs_switch.py write` from "
        f"{len(parts)} runs, each on a fresh start of a machine with NVIDIA GPUs "
        f"({meta['gpu']}, {meta['cpus']} CPUs, {meta['machine']}), torch {meta['torch']}: "
        + "; ".join(
            f"run {i + 1} on {p['meta']['date']}, commit {p['meta']['commit']}"
            for i, p in enumerate(parts)
        )
        + f". The launch-bound MLP (48 Linear(256)+GELU, batch 64), {meta['processes']} fresh "
        f"processes per method and run in rounds whose order rotates, {meta['steps']} timed "
        "steps each. Single-threaded backward against multithreaded, in percent of the "
        "multithreaded backward time; negative: faster single-threaded.",
        "",
        "| run | method | median | per process | pairs per process |",
        "| --- | --- | ---: | --- | --- |",
    ]
    for i, part in enumerate(parts):
        for name, median, values, pairs in rows_of(part):
            lines.append(
                f"| {i + 1} | {name} | {median:+.1f}% | "
                f"{', '.join(f'{v:+.1f}%' for v in values)} | {pairs} |"
            )
    lines += [f"<!-- /{MARKER} -->", ""]
    section = "\n".join(lines)
    doc_sections.replace_section(args.output, MARKER, section)
    print(section)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("child")
    one.add_argument("--steps", type=int, default=400)
    one.add_argument("--warmup", type=int, default=30)
    one.add_argument("--after", action="store_true", help="the switch after multithreaded steps")
    many = sub.add_parser("run")
    many.add_argument("--processes", type=int, default=5)
    many.add_argument("--steps", type=int, default=400)
    many.add_argument("--out", required=True)
    out = sub.add_parser("write")
    out.add_argument("results", nargs="+", help="one JSON per run (machine start)")
    out.add_argument("--output", default=os.path.join(REPO, "docs", "threading-cost.md"))
    args = parser.parse_args()
    if args.command == "child":
        (after_child if args.after else blocks_child)(args)
    else:
        {"run": run, "write": write}[args.command](args)


if __name__ == "__main__":
    main()
