"""Writes docs/semantics.md: what the events mean, with measured rates.

    python tools/measure_semantics.py [--output docs/semantics.md]

Runs the backward-scenario corpus (test/backward_scenarios.py) under the
pinned torch with this library and an "executed" oracle: node pre-hooks
record the device each node of each pass actually ran on. It compares the
events with the events those executed devices would give, for this library
here and for torch 2.14.1 and 2.15.0 as recorded in
test/fixtures/upstream_backward_events.json, and fails if this library's
events differ from torch's own anywhere. Needs the CMake build (README).
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

import generated_docs
import scenario_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(REPO, "test", "fixtures", "upstream_backward_events.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "semantics.md"))
    parser.add_argument("--python", help="interpreter with the pinned torch (default: the venv)")
    args = parser.parse_args()
    python = args.python or os.path.join(
        subprocess.run(
            ["bash", os.path.join(REPO, "tools", "setup_env.sh")],
            check=True,
            text=True,
            stdout=subprocess.PIPE,
        ).stdout.strip(),
        "bin",
        "python",
    )
    build_dir = os.environ.get("AUTOGRAD_DEVICE_LOGGING_BUILD_DIR", os.path.join(REPO, "build"))
    torch_version = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        check=True,
        text=True,
        stdout=subprocess.PIPE,
    ).stdout.strip()
    with open(FIXTURE) as f:
        fixture = json.load(f)
    scenarios = fixture["scenarios"]
    ours = scenario_corpus.run_corpus(python, build_dir, len(scenarios), with_library=True)
    kinds = [answer["kind"] for answer in ours]

    sources = {f"torch {v} (its own events)": v for v in sorted(fixture["torch"], reverse=True)}
    sources[f"this library on torch {torch_version}"] = None
    rows = []
    for label, version in sources.items():
        counts = {"full": [0, 0], "partial": [0, 0]}
        for scenario, answer, kind in zip(scenarios, ours, kinds):
            if version is None:
                events, executed = answer["events"], answer["executed_events"]
            else:
                events = scenario["events"][version]
                executed = scenario["executed_events"][version]
            counts[kind][0] += events != executed
            counts[kind][1] += 1
        rows.append((label, counts))
    mismatched = [
        s["seed"]
        for s, a in zip(scenarios, ours)
        if any(a["events"] != e for e in s["events"].values())
    ]

    def share(n, total):
        return f"{n} of {total} ({100.0 * n / total:.1f}%)"

    w = []
    w.append("# What the autograd device events mean\n")
    w.append(
        f"Written by `python tools/measure_semantics.py` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, commit "
        f"{generated_docs.commit()} "
        f"({platform.machine()}, Python {platform.python_version()}, "
        f"pinned torch {torch_version}); torch's own answers were recorded by "
        f"`tools/record_upstream_answers.py` on {fixture['recorded']} "
        f"(torch {', '.join(fixture['torch'].values())}).\n"
    )
    w.append("## Which nodes a pass's classification considers\n")
    w.append(
        "One backward pass (one call of `Engine::compute_dependencies`: one "
        "`backward()` or `torch.autograd.grad()` call, or one reentrant inner "
        "pass) is classified by the nodes the dependency walk reaches from its "
        "root, whose `topological_nr()` is at least the pass's `min_topo_nr` "
        "(the lowest of its output edges; 0 for a plain `backward()`), and the "
        "root itself. Each node counts by the device the engine would queue it "
        "on, read from its input metadata (one entry per gradient it takes): "
        "the first non-CPU device among them, else the CPU (CPU, meta and lazy "
        "devices are CPU-routed); a node that takes no gradient carries no "
        "device. Two or more distinct accelerator devices give "
        "`torch.autograd.multidevice_backward`; an accelerator device and a "
        "CPU-routed node give "
        "`torch.autograd.gpu_cpu_backward`. Each event is logged once per process.\n"
    )
    w.append(
        "This is torch's own rule from 2.14 on, and this library's on earlier "
        "releases: the recorded differential below requires the same events "
        "as torch's own on every scenario.\n"
    )
    w.append("## Where that differs from where the engine runs work\n")
    w.append(
        "The engine runs a node on the device of the gradients it receives "
        "(the first non-CPU one), and only the nodes a pass needs. The "
        "classification is by graph structure instead, so it can differ:\n"
    )
    w.append(
        "- **Partial passes** (`torch.autograd.grad`, `backward(inputs=)`): the "
        "walk reaches branches the inputs do not need, and they are classified "
        "though they never run. A `grad()` whose inputs are not reachable at all "
        "runs nothing and is still classified.\n"
        "- **Multi-output nodes with unused outputs**: a node counts by the "
        "metadata of all its outputs, so an output on another device that got "
        "no gradient decides where it counts, while the engine runs it where "
        "its gradients arrive.\n"
        "- Nodes below `min_topo_nr` are neither run nor classified, in torch "
        "and here alike.\n"
    )
    w.append(
        'The corpus measures how often. The "executed" oracle registers a node '
        "pre-hook on every node of each pass and records the device of the "
        "gradients that arrive (the first non-CPU one, else the CPU), then "
        "applies the same two-event rule to those devices per pass. A scenario "
        "counts as different when its events differ from the executed devices' "
        "events.\n"
    )
    w.append(
        f"| classifier | full passes: events differ from executed | "
        f"partial passes: events differ from executed |\n| --- | --- | --- |"
    )
    for label, counts in rows:
        w.append(f"| {label} | {share(*counts['full'])} | {share(*counts['partial'])} |")
    w.append("")
    w.append(
        f"This library's events equal torch's own in {len(scenarios) - len(mismatched)} of "
        f"{len(scenarios)} scenarios"
        + (f"; they differ in seeds {mismatched[:20]}." if mismatched else ".")
        + " The difference from the executed devices is upstream's meaning; this "
        "library keeps it, so that fleet data from torch before 2.14 (this "
        "library) and from 2.14 on (torch itself) means one thing.\n"
    )
    w.append(
        "The scenarios: seeded random programs over cpu, testaccel:0 and "
        "testaccel:1 (leaves on random devices, chains of ops with `.to()` "
        "moves, multi-output `autograd.Function`s with unused outputs, `detach` "
        "and `no_grad` islands, `retain_graph` second passes, double backward, "
        "reentrant and non-reentrant checkpoint, `grad` and `backward(inputs=)` "
        "on random subsets including non-leaf inputs, several roots, roots on "
        "each device, and meta-only passes), each run in a fresh child process. "
        "`python test/backward_scenarios.py --show SEED` prints one.\n"
    )
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    generated_docs.write_section(
        args.output,
        "semantics",
        "\n".join(["<!-- semantics -->", *w, "<!-- /semantics -->"]),
        whole=True,
    )
    print(f"wrote {args.output}")
    if mismatched:
        print(f"this library differs from torch's own events on seeds {mismatched[:20]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
