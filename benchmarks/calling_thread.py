"""Single-device passes on the calling thread, measured as a user sees them:
whole process against whole process.

    python3 benchmarks/calling_thread.py run --placement free --out free.json
    python3 benchmarks/calling_thread.py run --placement one-cpu --out one-cpu.json
    python3 benchmarks/calling_thread.py write free.json one-cpu.json [--output docs/threading-cost.md]

Runs on a machine with NVIDIA GPUs. `run` builds the library against the
torch of this interpreter (into $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR, default
build-calling-thread/) and times each model in fresh processes, one per
(model, mode), in rounds whose mode order rotates, so that every mode meets
every moment of the machine's drift alike:

- stock: torch alone, as installed;
- opt-in: the library loaded ahead of torch with
  AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD=1 (Note [Single-device passes on the
  calling thread]);
- switch: torch alone with torch.autograd.set_multithreading_enabled(False)
  for the whole process;
- in-job estimate (the launch-bound MLP only, with --estimate): the library with
  AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING=1, which times pairs of passes
  with multithreading off and on inside the job (Note [Measuring the cost of
  single-threaded backward]); its estimate is printed beside what switching
  the whole process did.

Each process runs warm-up steps, then times STEPS steps: forward, synchronize,
backward() up to the synchronize after it; a process's figures are the
medians over its steps. Beside the times, the same steps give the mechanism
(Note [The calling thread from the root]): which thread ran each pass's root
node (a hook on the loss, run in its grad_fn's pre-hook) and its last node
(a hook on the first layer's weight), and how often the calling thread slept
during backward (its voluntary context switches in /proc/thread-self/status,
read outside the timed span). The in-job estimate runs only with
--estimate. --placement one-cpu pins every process to one CPU
(sched_setaffinity before torch is imported). `write` puts the runs (several runs of
one placement, from separate machine starts, pool their processes) into one
section of docs/threading-cost.md, with the commit, machine
and torch they ran on.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "calling-thread"
MODES = ("stock", "opt-in", "switch")
ESTIMATE = "in-job estimate"

# name -> (description, builds (model, input, loss_fn) on a device)
MODELS = {
    "mlp48": "launch-bound MLP, 48 Linear(256)+GELU, batch 64",
    "mlp24": "MLP, 24 Linear(1024)+ReLU, batch 256",
    "cnn": "small CNN, batch 64 of 3x32x32",
    "transformer": "4-layer TransformerEncoder(256), batch 32 x 64 tokens",
    "mlp48-cpu-loss": "launch-bound MLP with its loss on the CPU (accelerator_cpu)",
}


def build(name, device):
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name.startswith("mlp48"):
        layers = []
        for _ in range(48):
            layers += [nn.Linear(256, 256), nn.GELU()]
        model, x = nn.Sequential(*layers), torch.randn(64, 256)
    elif name == "mlp24":
        layers = []
        for _ in range(24):
            layers += [nn.Linear(1024, 1024), nn.ReLU()]
        model, x = nn.Sequential(*layers), torch.randn(256, 1024)
    elif name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        )
        x = torch.randn(64, 3, 32, 32)
    elif name == "transformer":
        layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
        model, x = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False), torch.randn(
            32, 64, 256
        )
    else:
        raise ValueError(name)
    model, x = model.to(device), x.to(device)
    if name.endswith("cpu-loss"):
        return model, x, lambda out: out.cpu().pow(2).mean()
    return model, x, lambda out: out.pow(2).mean()


def child(args):
    """One process: times one model in one mode; prints one JSON line."""
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.mode in ("opt-in", ESTIMATE):
        import autograd_device_logging as adl
    import torch

    if args.mode == "switch":
        # Kept: on torch 2.0 the setting lasts only as long as this object.
        switch = torch.autograd.set_multithreading_enabled(False)  # noqa: F841
    model, x, loss_of = build(args.model, "cuda:0")
    # Where the pass's root node and its last node (the first layer's
    # gradient) ran: on the thread that called backward(), or on a device
    # thread.
    caller, root_on_caller, last_on_caller = threading.get_ident(), [], []
    next(model.parameters()).register_hook(
        lambda g: last_on_caller.append(threading.get_ident() == caller) or g
    )
    backward, step, sleeps = [], [], []
    for i in range(args.warmup + args.steps):
        for p in model.parameters():
            p.grad = None
        t0 = time.perf_counter()
        loss = loss_of(model(x))
        loss.register_hook(lambda g: root_on_caller.append(threading.get_ident() == caller) or g)
        torch.cuda.synchronize()
        slept = voluntary_context_switches()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        slept = voluntary_context_switches() - slept
        if i >= args.warmup:
            backward.append((t2 - t1) * 1e3)
            step.append((t2 - t0) * 1e3)
            sleeps.append(slept)
    timed = slice(args.warmup, None)
    out = {
        "backward_ms": statistics.median(backward),
        "step_ms": statistics.median(step),
        "root_on_calling_thread": statistics.fmean(root_on_caller[timed]),
        "on_calling_thread": statistics.fmean(last_on_caller[timed]),
        "sleeps_per_pass": statistics.fmean(sleeps),
        # The last step's gradients, bit for bit: the same inputs and seed in
        # every process, so every mode should give the same bits.
        "gradients_sha256": hashlib.sha256(
            b"".join(p.grad.detach().cpu().numpy().tobytes() for p in model.parameters())
        ).hexdigest(),
    }
    if args.mode == "opt-in":
        status = adl.status()
        assert status.active and status.calling_thread, status
    if args.mode == ESTIMATE:
        cost = adl.threading_cost()
        measured = cost.classes.get("single_accelerator") if cost else None
        out["estimate_percent"] = measured.median_difference_percent if measured else None
        out["pairs"] = measured.pairs if measured else 0
    print("RESULT " + json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)  # Note [Children skip interpreter finalization]


def voluntary_context_switches():
    """How often the calling thread has slept so far."""
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise RuntimeError("no voluntary_ctxt_switches in /proc/thread-self/status")


def run(args):
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import doc_sections

    import torch

    package = doc_sections.build_library(
        "build-calling-thread", "-DAUTOGRAD_DEVICE_LOGGING_BUILD_TESTS=OFF"
    )
    cpu = sorted(os.sched_getaffinity(0))[-1] if args.placement == "one-cpu" else None
    meta = machine_meta(args, cpu, doc_sections, torch)
    results = []
    models = args.models or list(MODELS)
    for round_ in range(args.processes):
        for model in models:
            modes = list(MODES) + ([ESTIMATE] if args.estimate and model == "mlp48" else [])
            shift = round_ % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                env = dict(os.environ)
                for name in list(env):
                    if (
                        name.startswith("AUTOGRAD_DEVICE_LOGGING_")
                        and name != "AUTOGRAD_DEVICE_LOGGING_BUILD_DIR"
                    ):
                        del env[name]
                if mode in ("opt-in", ESTIMATE):
                    env["PYTHONPATH"] = package + os.pathsep + env.get("PYTHONPATH", "")
                if mode == "opt-in":
                    env["AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD"] = "1"
                if mode == ESTIMATE:
                    env["AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING"] = "1"
                    env["AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE"] = "0.25"
                command = [
                    sys.executable,
                    __file__,
                    "child",
                    model,
                    mode,
                    "--steps",
                    str(args.steps),
                ]
                if cpu is not None:
                    command += ["--cpu", str(cpu)]
                proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
                lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
                if proc.returncode != 0 or not lines:
                    sys.exit(f"{model} {mode}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
                result = dict(json.loads(lines[0][7:]), model=model, mode=mode, round=round_)
                results.append(result)
                print(json.dumps(result), flush=True)
                # Kept as it grows: a run cut short keeps its finished rounds.
                save(args.out, meta, results)


def save(path, meta, results):
    with open(path + ".tmp", "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    os.replace(path + ".tmp", path)


def machine_meta(args, cpu, doc_sections, torch):
    return {
        "placement": args.placement,
        "cpu": cpu,
        "commit": doc_sections.commit(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "processes": args.processes,
        "steps": args.steps,
    }


def merge_runs(paths):
    """The runs of `paths`, one part per placement: runs of one placement
    (separate machine starts, say) pool their processes, and must share the
    commit, GPU and torch."""
    parts = {}
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        meta = run["meta"]
        part = parts.get(meta["placement"])
        if part is None:
            part = parts[meta["placement"]] = {
                "meta": dict(meta, processes=0, dates=[]),
                "results": [],
            }
        for key in ("commit", "gpu", "torch", "steps", "cpu"):
            if meta[key] != part["meta"][key]:
                sys.exit(f"{path}: {key} {meta[key]!r} differs from {part['meta'][key]!r}")
        rounds = part["meta"]["processes"]
        part["results"] += [dict(r, round=r["round"] + rounds) for r in run["results"]]
        part["meta"]["processes"] += meta["processes"]
        part["meta"]["dates"].append(meta["date"])
    return list(parts.values())


def write(args):
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import doc_sections

    parts = merge_runs(args.results)
    meta = parts[0]["meta"]
    lines = [
        f"<!-- {MARKER} -->",
        "## Single-device passes on the calling thread, whole process against whole process",
        "",
        f"Written by `python3 benchmarks/calling_thread.py write` from runs on "
        f"{', '.join(meta['dates'])}, "
        f"commit {meta['commit']}, on a machine with NVIDIA GPUs ({meta['gpu']}, "
        f"{meta['cpus']} CPUs, {meta['machine']}), torch {meta['torch']}.",
        "",
        f"Each cell: {meta['processes']} fresh processes per mode, in rounds whose mode order "
        f"rotates; each process times {meta['steps']} steps after its warm-up and gives the "
        "median; the cell is the median over processes and their range. stock: torch alone; "
        "opt-in: AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD=1; switch: "
        "torch.autograd.set_multithreading_enabled(False) for the whole process. "
        "backward vs stock, vs switch: the median process's backward time against stock's "
        "and against the switch's; negative is faster.",
        "",
        "| model | placement | mode | backward ms: median (range) | step ms: median (range) "
        "| backward vs stock | vs switch |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    mechanism = [
        "",
        "The mechanism, from the same processes and steps (Note [The calling thread from "
        "the root]): the share of timed passes whose root node (the loss's grad_fn) and "
        "whose last node (the first layer's weight gradient) ran on the thread that called "
        "backward(), and the calling thread's voluntary context switches per pass during "
        "backward (the times it slept, waiting for a device thread or anything else), as "
        "the median over processes and their range; and how many different bit patterns "
        "the last step's gradients took over the processes (every process has the same "
        "inputs and seed), and whether they are stock's.",
        "",
        "| model | placement | mode | root on the calling thread | last node on the calling "
        "thread | caller's sleeps per pass: median (range) | distinct gradient bits over "
        "processes |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    estimates = []
    for part in parts:
        placement = part["meta"]["placement"] + (
            f" (CPU {part['meta']['cpu']})" if part["meta"]["cpu"] is not None else ""
        )
        by = {}
        for r in part["results"]:
            by.setdefault((r["model"], r["mode"]), []).append(r)
        for model in MODELS:
            if (model, "stock") not in by:
                continue
            stock = statistics.median(r["backward_ms"] for r in by[(model, "stock")])
            switch = statistics.median(r["backward_ms"] for r in by.get((model, "switch"), []))
            for mode in MODES:
                rows = by.get((model, mode), [])
                if not rows:
                    continue
                b = [r["backward_ms"] for r in rows]
                s = [r["step_ms"] for r in rows]
                lines.append(
                    f"| {MODELS[model]} | {placement} | {mode} | "
                    f"{statistics.median(b):.2f} ({min(b):.2f}–{max(b):.2f}) | "
                    f"{statistics.median(s):.2f} ({min(s):.2f}–{max(s):.2f}) | "
                    f"{(statistics.median(b) / stock - 1) * 100:+.1f}% | "
                    f"{(statistics.median(b) / switch - 1) * 100:+.1f}% |"
                )
                if "sleeps_per_pass" in rows[0]:
                    mine = {r["gradients_sha256"] for r in rows}
                    stocks = {r["gradients_sha256"] for r in by[(model, "stock")]}
                    bits = (
                        f"{len(mine)}, stock's"
                        if mine == stocks
                        else f"{len(mine)} (stock: {len(stocks)}, {len(mine & stocks)} shared)"
                    )
                    z = [r["sleeps_per_pass"] for r in rows]
                    root = statistics.median(r["root_on_calling_thread"] for r in rows)
                    last = statistics.median(r["on_calling_thread"] for r in rows)
                    mechanism.append(
                        f"| {MODELS[model]} | {placement} | {mode} | {root * 100:.0f}% | "
                        f"{last * 100:.0f}% | "
                        f"{statistics.median(z):.2f} ({min(z):.2f}–{max(z):.2f}) | "
                        f"{bits} |"
                    )
            rows = by.get((model, ESTIMATE), [])
            if rows:
                switch = [r["backward_ms"] for r in by[(model, "switch")]]
                values = [r["estimate_percent"] for r in rows if r["estimate_percent"] is not None]
                estimates.append(
                    (
                        MODELS[model],
                        placement,
                        (statistics.median(switch) / stock - 1) * 100,
                        (min(switch) / stock - 1) * 100,
                        (max(switch) / stock - 1) * 100,
                        values,
                        [r["pairs"] for r in rows],
                    )
                )
    if len(mechanism) > 5:
        lines += mechanism
    if estimates:
        lines += [
            "",
            "The in-job estimate beside the whole-process switch: the estimate is each "
            "process's median over its pairs of (off − on) / on (AUTOGRAD_DEVICE_LOGGING_"
            "MEASURE_THREADING=1, rate 0.25); the switch is the whole process with "
            "multithreading off against stock, over the same rounds.",
            "",
            "| model | placement | switch vs stock: median (range over processes) "
            "| in-job estimate per process | pairs per process |",
            "| --- | --- | ---: | --- | --- |",
        ]
        for name, placement, median, low, high, values, pairs in estimates:
            lines.append(
                f"| {name} | {placement} | {median:+.1f}% ({low:+.1f}% … {high:+.1f}%) | "
                + ", ".join(f"{v:+.1f}%" for v in values)
                + f" | {', '.join(str(p) for p in pairs)} |"
            )
    lines += [f"<!-- /{MARKER} -->", ""]
    section = "\n".join(lines)
    doc_sections.replace_section(args.output, MARKER, section)
    print(section)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("child")
    one.add_argument("model", choices=list(MODELS))
    one.add_argument("mode", choices=[*MODES, ESTIMATE])
    one.add_argument("--steps", type=int, default=200)
    one.add_argument("--warmup", type=int, default=30)
    one.add_argument("--cpu", type=int)
    many = sub.add_parser("run")
    many.add_argument("--placement", choices=("free", "one-cpu"), default="free")
    many.add_argument("--processes", type=int, default=4)
    many.add_argument("--steps", type=int, default=200)
    many.add_argument("--models", nargs="*", choices=list(MODELS))
    many.add_argument("--estimate", action="store_true", help="also the in-job estimate")
    many.add_argument("--out", required=True)
    out = sub.add_parser("write")
    out.add_argument("results", nargs="+")
    out.add_argument("--output", default=os.path.join(REPO, "docs", "threading-cost.md"))
    args = parser.parse_args()
    {"child": child, "run": run, "write": write}[args.command](args)


if __name__ == "__main__":
    main()
