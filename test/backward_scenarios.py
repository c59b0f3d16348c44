"""Random backward scenarios, run one per fresh process, and their events.

A scenario is a short Python program that builds an autograd graph over the
devices cpu, d0 and d1 (two accelerator devices: testaccel:0/1, or
cuda:0/1) and runs one or more backward passes. generate(seed) writes it; the
same seed always gives the same program, and a scenario prints as code that
runs on its own (program_text).

The autograd device events are once per process, so each scenario runs in a
child forked after torch is imported and before any backward pass, with its
stderr going to a file (PYTORCH_API_USAGE_STDERR=1 must be set); the events
are read from there. Optionally (--executed), the child also records the
devices the engine actually ran each pass's nodes on, through node pre-hooks,
and the events those devices would give (docs/semantics.md).

    python test/backward_scenarios.py --seeds 0:2400 [--devices cuda] [--executed]
    python test/backward_scenarios.py --show SEED

prints one JSON object per scenario: seed, events, error, code_sha256 (what
the recorded answers name its program by), kind ("full" or "partial": a pass
over part of the graph), and with --executed, executed_events. With --with-library the package (on PYTHONPATH)
is imported before torch and must be active.
"""

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import tempfile

# Bump when generate() changes what it writes for a seed: the recorded
# answers (test/fixtures/upstream_backward_events.json) hold the programs of
# one generator version.
GENERATOR_VERSION = 1

EVENTS = ("torch.autograd.multidevice_backward", "torch.autograd.gpu_cpu_backward")

# Defined once in the parent; printed at the top of a scenario shown as code.
PRELUDE = '''\
from torch.utils.checkpoint import checkpoint


class MultiDeviceOutputs(torch.autograd.Function):
    """One output per device in `devices`; the caller may leave some unused."""

    @staticmethod
    def forward(ctx, x, devices):
        ctx.device = x.device
        return tuple(x.to(d) * (i + 1) for i, d in enumerate(devices))

    @staticmethod
    def backward(ctx, *grads):
        return sum(g.to(ctx.device) * (i + 1) for i, g in enumerate(grads)), None
'''

ACCELERATOR_DEVICES = ("cpu", "d0", "d1")
ACCELERATOR_MODULE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "autograd_test_accelerator.py"
)


class _Writer:
    """Builds one scenario's program from a seeded random.Random."""

    def __init__(self, rng, devices):
        self.rng = rng
        self.devices = devices
        self.lines = []
        self.values = []  # (name, device): tensors that require grad
        self.constants = []  # (name, device): tensors that do not
        self.count = 0
        self.reentrant = False

    def name(self, prefix="v"):
        self.count += 1
        return f"{prefix}{self.count}"

    def device(self):
        return self.rng.choice(self.devices)

    def pick(self):
        # Later values are likelier, so that graphs grow deep as well as wide.
        n = len(self.values)
        return self.values[min(n - 1, int(n * self.rng.random() ** 0.5))]

    def leaf(self):
        name, device = self.name("l"), self.device()
        self.lines.append(f"{name} = torch.randn(3, device={device}, requires_grad=True)")
        self.values.append((name, device))

    def step(self, allow_checkpoint):
        rng = self.rng
        src, device = self.pick()
        weights = {"unary": 4, "move": 5, "binary": 4, "multi": 2, "island": 2}
        if allow_checkpoint:
            weights["checkpoint"] = 1
        (kind,) = rng.choices(list(weights), list(weights.values()))
        out = self.name()
        if kind == "unary":
            op = rng.choice(["* 2", "+ 1", ".sin()", ".tanh()", ".exp()"])
            self.lines.append(f"{out} = {src}{op}" if op[0] == "." else f"{out} = {src} {op}")
            self.values.append((out, device))
        elif kind == "move":
            to = self.device()
            self.lines.append(f"{out} = {src}.to({to})")
            self.values.append((out, to))
        elif kind == "binary":
            other, _ = rng.choice(self.values + self.constants)
            op = rng.choice(["*", "+"])
            self.lines.append(f"{out} = {src} {op} {other}.to({device})")
            self.values.append((out, device))
        elif kind == "multi":
            targets = [self.device() for _ in range(rng.randint(2, 3))]
            names = [out] + [self.name() for _ in targets[1:]]
            self.lines.append(
                f"{', '.join(names)} = MultiDeviceOutputs.apply({src}, ({', '.join(targets)},))"
            )
            used = [(n, d) for n, d in zip(names, targets) if rng.random() < 0.6]
            self.values.extend(used)  # the others stay unused
        elif kind == "island":
            if rng.random() < 0.5:
                self.lines.append(f"with torch.no_grad():\n    {out} = {src} * 3")
                self.constants.append((out, device))
            elif rng.random() < 0.5:
                self.lines.append(f"{out} = {src}.detach()")
                self.constants.append((out, device))
            else:  # a new leaf cut from the graph above it
                self.lines.append(f"{out} = {src}.detach().requires_grad_()")
                self.values.append((out, device))
        else:
            reentrant = rng.random() < 0.5
            self.reentrant |= reentrant
            a, b = self.device(), self.device()
            self.lines.append(
                f"{out} = checkpoint(lambda t: (t * 2).to({a}).sin().to({b}), {src}, "
                f"use_reentrant={reentrant})"
            )
            self.values.append((out, b))

    def root(self):
        terms = {self.pick()[0] for _ in range(self.rng.randint(1, 2))}
        to = self.device()
        name = self.name("loss")
        self.lines.append(f"{name} = " + " + ".join(f"{n}.sum().to({to})" for n in sorted(terms)))
        return name

    def inputs(self):
        chosen = self.rng.sample(self.values, self.rng.randint(1, min(3, len(self.values))))
        return "[" + ", ".join(n for n, _ in chosen) + "]"


def generate(seed):
    """The program of scenario `seed` (uses torch, cpu, d0, d1 and PRELUDE)."""
    rng = random.Random(f"backward-scenario-{GENERATOR_VERSION}-{seed}")
    meta_only = rng.random() < 0.05
    w = _Writer(rng, ("meta",) if meta_only else ACCELERATOR_DEVICES)
    for _ in range(rng.randint(1, 4)):
        w.leaf()
    # The checkpoint's recomputation saves RNG state per device: not on meta.
    for _ in range(rng.randint(1, 8)):
        w.step(allow_checkpoint=not meta_only)
    loss = w.root()
    # Reentrant checkpoint supports plain backward() only.
    kinds = ["backward", "several_roots", "retain_twice"]
    if not w.reentrant:
        kinds += ["grad", "grad", "backward_inputs", "backward_inputs", "double_backward"]
    kind = rng.choice(kinds)
    if kind == "backward":
        w.lines.append(f"{loss}.backward()")
    elif kind == "several_roots":
        other = w.root()
        inputs = "" if w.reentrant or rng.random() < 0.5 else f", inputs={w.inputs()}"
        w.lines.append(f"torch.autograd.backward([{loss}, {other}]{inputs})")
    elif kind == "retain_twice":
        w.lines.append(f"{loss}.backward(retain_graph=True)")
        if w.reentrant or rng.random() < 0.5:
            w.lines.append(f"{loss}.backward()")
        else:
            w.lines.append(f"torch.autograd.grad({loss}, {w.inputs()}, allow_unused=True)")
    elif kind == "grad":
        w.lines.append(f"torch.autograd.grad({loss}, {w.inputs()}, allow_unused=True)")
    elif kind == "backward_inputs":
        w.lines.append(f"{loss}.backward(inputs={w.inputs()})")
    else:
        w.lines.append(
            f"grads = torch.autograd.grad({loss}, {w.inputs()}, create_graph=True, "
            "allow_unused=True)"
        )
        w.lines.append("second = [g.sum() for g in grads if g is not None and g.requires_grad]")
        w.lines.append("if second:\n    torch.autograd.backward(second)")
    return "\n".join(w.lines) + "\n"


def device_setup(devices):
    if devices == "cuda":
        return 'cpu, d0, d1 = torch.device("cpu"), torch.device("cuda", 0), torch.device("cuda", 1)'
    # The test accelerator's module from its file (ACCELERATOR_MODULE), so
    # that the program runs from anywhere without changing sys.path.
    return (
        "import importlib.util\n\n"
        'spec = importlib.util.spec_from_file_location("autograd_test_accelerator", '
        "ACCELERATOR_MODULE)\n"
        "autograd_test_accelerator = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(autograd_test_accelerator)\n"
        'cpu = torch.device("cpu")\n'
        "d0, d1 = autograd_test_accelerator.load()"
    )


def program_text(code, devices="testaccel"):
    """A scenario as a program that runs on its own (with the events on stderr)."""
    return (
        "# PYTORCH_API_USAGE_STDERR=1 python this.py\n"
        "import sys\n\nimport torch\n\n"
        + device_setup(devices).replace("ACCELERATOR_MODULE", repr(ACCELERATOR_MODULE))
        + '\nmeta = torch.device("meta")\n\n'
        + PRELUDE
        + "\n\n"
        + code
    )


def events_of_devices(devices):
    """The events a pass over nodes run on `devices` gives (upstream's rule)."""
    accelerators = {d for d in devices if d.type not in ("cpu", "meta")}
    events = set()
    if len(accelerators) >= 2:
        events.add(EVENTS[0])
    if accelerators and len(accelerators) < len(devices):
        events.add(EVENTS[1])
    return events


def record_executed_devices(torch, executed_events):
    """Wraps torch.autograd.backward and grad: each pass's reachable nodes get
    pre-hooks that record the device each node runs on (the first non-CPU
    device among the gradients it receives, else CPU: where the engine queues
    it), and the pass's events by those devices are added to executed_events.
    """

    def node_device(grads):
        present = [g.device for g in grads if g is not None]
        return next((d for d in present if d.type != "cpu"), present[0] if present else None)

    def traced(function):
        def wrapper(outputs, *args, **kwargs):
            roots = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
            ran, handles, seen = set(), [], set()

            def record(grads):
                device = node_device(grads)
                if device is not None:
                    ran.add(device)

            stack = [t.grad_fn for t in roots if t.grad_fn is not None]
            while stack:
                node = stack.pop()
                if node is None or id(node) in seen:
                    continue
                seen.add(id(node))
                handles.append(node.register_prehook(record))
                stack.extend(next_node for next_node, _ in node.next_functions)
            try:
                return function(outputs, *args, **kwargs)
            finally:
                for handle in handles:
                    handle.remove()
                executed_events.update(events_of_devices(ran))

        return wrapper

    torch.autograd.backward = traced(torch.autograd.backward)
    torch.autograd.grad = traced(torch.autograd.grad)


def _child(torch, namespace, code, result_path, executed, library):
    signal.alarm(120)
    answer = {"error": None}
    executed_events = set()
    if executed:
        record_executed_devices(torch, executed_events)
    try:
        exec(compile(code, "<scenario>", "exec"), dict(namespace))
    except Exception as e:  # the answer records it; both sides must agree
        answer["error"] = type(e).__name__
    if executed:
        answer["executed_events"] = sorted(executed_events)
    if library is not None:  # its hook must have run in every pass
        answer["library_active"] = library.status().active
    with open(result_path, "w") as f:
        json.dump(answer, f)
    sys.stdout.flush()
    sys.stderr.flush()


def run_scenarios(torch, namespace, scenarios, jobs, executed=False, library=None):
    """Runs (seed, code) pairs, each in a child forked from this process;
    yields one answer per scenario, in order."""
    if os.environ.get("PYTORCH_API_USAGE_STDERR") != "1":
        raise RuntimeError("set PYTORCH_API_USAGE_STDERR=1: the events are read from stderr")
    with tempfile.TemporaryDirectory() as tmp:
        pending = list(scenarios)
        running, done = {}, {}
        order = [seed for seed, _ in pending]
        next_out = 0
        while pending or running:
            while pending and len(running) < jobs:
                seed, code = pending.pop(0)
                stderr_path = os.path.join(tmp, f"{seed}.stderr")
                result_path = os.path.join(tmp, f"{seed}.json")
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    try:
                        fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                        os.dup2(fd, 2)
                        _child(torch, namespace, code, result_path, executed, library)
                    finally:
                        os._exit(0)
                running[pid] = (seed, stderr_path, result_path)
            pid, status = os.wait()
            seed, stderr_path, result_path = running.pop(pid)
            with open(stderr_path) as f:
                stderr = f.read()
            answer = {"seed": seed}
            answer["events"] = sorted(
                {
                    line.split()[1]
                    for line in stderr.splitlines()
                    if line.startswith("PYTORCH_API_USAGE ") and line.split()[1] in EVENTS
                }
            )
            try:
                with open(result_path) as f:
                    answer.update(json.load(f))
            except (OSError, ValueError):
                answer["error"] = f"child died (wait status {status}): {stderr[-300:]}"
            done[seed] = answer
            while next_out < len(order) and order[next_out] in done:
                yield done.pop(order[next_out])
                next_out += 1


# Note [Replaying on CUDA in reused processes]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A fresh child per scenario creates a CUDA context on each GPU it touches,
# which costs about a second of driver time per child: the corpus would take
# most of an hour. On CUDA, the corpus therefore runs in a few worker
# processes (forked before CUDA is initialized), each of which runs many
# scenarios and puts the library's once-per-process state back to "nothing
# emitted" before each one (the reset_raised_events_for_testing seam). The
# answer is then the library's own record of the events it emitted:
# C10_LOG_API_USAGE_ONCE prints each event once per process, so stderr no
# longer shows them all. That the printed events follow the library's record
# is covered in fresh processes by the other tests, on CUDA too.
def run_scenarios_in_workers(torch, namespace, scenarios, jobs, library):
    """Like run_scenarios, with the library's record instead of stderr."""
    import ctypes

    reset = library._activation.library().autograd_device_logging_reset_raised_events_for_testing
    reset.argtypes = [ctypes.c_uint]
    scenarios = list(scenarios)
    with tempfile.TemporaryDirectory() as tmp:
        pids = {}
        for worker in range(min(jobs, len(scenarios))):
            path = os.path.join(tmp, f"worker{worker}.jsonl")
            pid = os.fork()
            if pid == 0:
                try:
                    with open(path, "w") as out:
                        for seed, code in scenarios[worker::jobs]:
                            reset(0)
                            answer = {"seed": seed, "error": None}
                            try:
                                exec(compile(code, "<scenario>", "exec"), dict(namespace))
                            except Exception as e:
                                answer["error"] = type(e).__name__
                            status = library.status()
                            answer["events"] = sorted(status.events_raised)
                            answer["library_active"] = status.active
                            out.write(json.dumps(answer) + "\n")
                finally:
                    os._exit(0)
            pids[pid] = path
        answers = {}
        while pids:
            pid, status = os.wait()
            path = pids.pop(pid)
            if status != 0:
                raise RuntimeError(f"a worker died (wait status {status})")
            with open(path) as f:
                for line in f:
                    answer = json.loads(line)
                    answers[answer["seed"]] = answer
    for seed, _ in scenarios:
        yield answers.get(seed, {"seed": seed, "events": [], "error": "no answer"})


def code_hash(code):
    """What the recorded answers name a scenario's program by."""
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def kind(code):
    """ "partial" for a scenario with a pass over part of the graph
    (autograd.grad, or backward with inputs=), else "full"."""
    if "torch.autograd.grad(" in code or "inputs=" in code:
        return "partial"
    return "full"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0:2400", help="START:STOP (default 0:2400)")
    parser.add_argument("--devices", choices=("testaccel", "cuda"), default="testaccel")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--executed", action="store_true", help="also record executed devices")
    parser.add_argument("--with-library", action="store_true", help="import the package first")
    parser.add_argument(
        "--reuse-processes",
        action="store_true",
        help="run many scenarios per worker, resetting the library's once-per-process "
        "state in between (needs --with-library; Note [Replaying on CUDA in reused processes])",
    )
    parser.add_argument("--show", type=int, metavar="SEED", help="print one scenario as code")
    parser.add_argument(
        "--generator-version", action="store_true", help="print GENERATOR_VERSION and exit"
    )
    parser.add_argument(
        "--programs",
        metavar="FILE",
        help="JSON list of {seed, code} to run instead of generating --seeds",
    )
    args = parser.parse_args(argv)
    if args.show is not None:
        print(program_text(generate(args.show), args.devices))
        return 0
    if args.generator_version:
        print(GENERATOR_VERSION)
        return 0
    if args.devices == "testaccel":
        # The test accelerator never shares a process with real CUDA devices,
        # and without them a child's first backward does not initialize the
        # CUDA driver to count devices (seconds per child on a GPU machine).
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    library = None
    if args.with_library:
        import autograd_device_logging as library
    import torch

    if library is not None and library.status().disabled_reason:
        raise SystemExit(f"autograd_device_logging is disabled: {library.status().disabled_reason}")

    namespace = {"torch": torch, "sys": sys, "ACCELERATOR_MODULE": ACCELERATOR_MODULE}
    exec(device_setup(args.devices) + '\nmeta = torch.device("meta")\n' + PRELUDE, namespace)
    # What scenarios import lazily (checkpoint and meta kernels go through
    # torch._dynamo's import), imported once here rather than in each child.
    import torch._dynamo  # noqa: F401

    if args.programs:
        with open(args.programs) as f:
            scenarios = [(s["seed"], s["code"]) for s in json.load(f)]
    else:
        start, stop = (int(x) for x in args.seeds.split(":"))
        scenarios = [(seed, generate(seed)) for seed in range(start, stop)]
    if args.reuse_processes:
        if library is None or args.executed:
            parser.error("--reuse-processes needs --with-library, and not --executed")
        answers = run_scenarios_in_workers(torch, namespace, scenarios, args.jobs, library)
    else:
        answers = run_scenarios(torch, namespace, scenarios, args.jobs, args.executed, library)
    codes = dict(scenarios)
    for answer in answers:
        code = codes[answer["seed"]]
        answer.update(code_sha256=code_hash(code), kind=kind(code))
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
