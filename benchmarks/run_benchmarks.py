"""Overhead benchmark of autograd device logging; writes docs/performance.md.

    python3 benchmarks/run_benchmarks.py [--quick] [--no-upstream] [--output FILE]

(run with any Python 3; it sets up and builds what it needs through tools/).
Measures Engine::compute_dependencies and the whole backward() on CPU chain
and wide graphs of about 10, 1,000 and 100,000 nodes, and on graphs on the
test accelerator, in these states:

  stock            the library absent
  lib, no accel    the library present in a process without accelerator devices
  lib, before      the library present, test accelerator loaded, no event fired
  lib, after       the same after both events fired

Instruction counts come from callgrind (collection on only around the
measured call, so they are deterministic); wall times from Google Benchmark,
each configuration (stock torch with and without the test accelerator too) in
--rounds fresh processes interleaved with the others, into a section of its
own (Note [Reading wall times]); --wall-time-only writes that section alone.
The comparison with upstream's own implementation runs the same harness on
the torch of benchmarks/requirements-upstream.txt: its per-node cost is its
cost before its events fired minus its cost after (fired with the test
accelerator), and ours is measured the same way.
--quick leaves out the 100,000-node graphs (a smoke run).
"""

import argparse
import concurrent.futures
import datetime
import glob
import os
import re
import tempfile

import doc_sections
from benchmark_processes import WALL_ROUNDS, bench_of, machine, sh, wall_section, wall_times

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup(requirements, build_dir, cmake_args=""):
    env = dict(os.environ)
    env["AUTOGRAD_DEVICE_LOGGING_REQUIREMENTS"] = requirements
    venv = sh(["bash", f"{REPO}/tools/setup_env.sh"], env=env, capture_output=True).stdout.strip()
    python = os.path.join(venv, "bin", "python")
    env["AUTOGRAD_DEVICE_LOGGING_BUILD_DIR"] = build_dir
    env["AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS"] = cmake_args
    # What the benchmarks run, and nothing of the test suite.
    env["AUTOGRAD_DEVICE_LOGGING_TARGETS"] = " ".join(
        [
            "autograd_device_logging_bench",
            "autograd_device_logging_bench_patched",
            "autograd_device_logging_library",
            "autograd_device_logging_python",
            "autograd_test_accelerator",
        ]
    )
    sh(["bash", f"{REPO}/tools/build.sh", python], env=env, capture_output=True)
    version = sh(
        [python, "-c", "import torch; print(torch.__version__)"], capture_output=True
    ).stdout.strip()
    return {
        "torch": version,
        "bench": os.path.join(build_dir, "benchmarks", "autograd_device_logging_bench"),
        "lib": os.path.join(
            build_dir, "python", "autograd_device_logging", "libautograd_device_logging.so"
        ),
        "accel": os.path.join(build_dir, "test", "libautograd_test_accelerator.so"),
    }


COMPUTE_DEPENDENCIES = "Engine::compute_dependencies("


def inclusive_costs(path):
    """(program total, libtorch's compute_dependencies, ours) inclusive Ir."""
    out = sh(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", path], capture_output=True
    ).stdout
    total = libtorch = ours = 0
    for line in out.splitlines():
        match = re.match(r"\s*([\d,]+) .*", line)
        if not match:
            continue
        ir = int(match.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = ir
        elif COMPUTE_DEPENDENCIES in line and "libtorch_cpu.so]" in line:
            libtorch = ir
        elif COMPUTE_DEPENDENCIES in line and "libautograd_device_logging.so]" in line:
            ours = ir
    return total, libtorch, ours


def callgrind(build, patched, accelerator, iterations, max_nodes):
    """{(what, shape, placement, nodes, phase): per-call inclusive costs}.

    One process; with the accelerator, every case is measured before and
    after the events fired (Note [Measuring under callgrind] in the bench)."""
    flags = [f"--accelerator={build['accel']}"] if accelerator else []
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("LD_PRELOAD", None)
        sh(
            [
                "valgrind",
                "--tool=callgrind",
                "--collect-atstart=no",
                f"--callgrind-out-file={out}/cg.%p",
                bench_of(build, patched),
                f"--callgrind={iterations}",
                f"--max-nodes={max_nodes}",
                *flags,
            ],
            env=env,
            capture_output=True,
        )
        results = {}
        for path in glob.glob(f"{out}/cg.*.*"):
            head = open(path, "rb").read(4096).decode("latin-1")
            trigger = re.search(r"^desc: Trigger: Client Request: (\S+)", head, re.M)
            if not trigger:
                continue
            what, shape, placement, nodes, phase, reps, graph_nodes = trigger.group(1).split("/")
            calls = int(reps[1:])
            total, libtorch, ours = inclusive_costs(path)
            results[(what, shape, placement, int(nodes), phase)] = {
                "graph_nodes": int(graph_nodes[1:]),
                "total": total / calls,
                "libtorch": libtorch / calls,
                "ours": ours / calls,
                "added": (ours - libtorch) / calls if ours else 0.0,
            }
        return results


def pct(new, base):
    return 100.0 * (new - base) / base if base else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-upstream", action="store_true")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "performance.md"))
    parser.add_argument("--wall-time-only", action="store_true", help="only the wall-time section")
    parser.add_argument("--rounds", type=int, default=WALL_ROUNDS, help="wall-time rounds")
    args = parser.parse_args()
    max_nodes = 1000 if args.quick else 100000
    iterations = 20

    pinned = setup(os.path.join(REPO, "requirements.txt"), os.path.join(REPO, "build"))
    if args.wall_time_only:
        print("wall times", flush=True)
        times = wall_times(pinned, max_nodes, args.rounds)
        doc_sections.replace_section(
            args.output, "wall-time", wall_section(times, args.rounds, args, pinned)
        )
        print(f"wall-time section written to {args.output}")
        return
    jobs = {
        "cpu_process": (pinned, True, False),
        "accel_process": (pinned, True, True),
    }
    upstream = None
    if not args.no_upstream:
        upstream = setup(
            os.path.join(REPO, "benchmarks", "requirements-upstream.txt"),
            os.path.join(REPO, "build-upstream"),
            "-DAUTOGRAD_DEVICE_LOGGING_BENCHMARK_ON_NATIVE_TORCH=ON",
        )
        jobs["upstream_stock"] = (upstream, False, True)
        jobs["upstream_ours"] = (upstream, True, True)
    print(f"callgrind: {len(jobs)} runs", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = {
            key: pool.submit(callgrind, b, p, a, iterations, max_nodes)
            for key, (b, p, a) in jobs.items()
        }
        ir = {key: f.result() for key, f in futures.items()}
    print("wall times", flush=True)
    wall = wall_times(pinned, max_nodes, args.rounds)

    def keys(run, what, placement=None, phase="before"):
        return sorted(
            (
                k
                for k in ir[run]
                if k[0] == what and k[4] == phase and (placement is None or k[2] == placement)
            ),
            key=lambda k: (k[1], k[2], k[3]),
        )

    def name(k):
        return "/".join(str(x) for x in k[:4])

    lines = []
    w = lines.append
    verdicts = []
    w("# Overhead of autograd device logging")
    w("")
    w(
        f"Written by `python3 benchmarks/run_benchmarks.py{' --quick' if args.quick else ''}"
        f"{' --no-upstream' if args.no_upstream else ''}` on "
        f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, commit {doc_sections.commit()}."
    )
    w("")
    w(f"- machine: {machine()}")
    w(
        f"- pinned torch: {pinned['torch']}"
        + (f"; upstream torch: {upstream['torch']}" if upstream else "")
    )
    w(
        f"- instruction counts (Ir): callgrind, collection on only around the measured call, "
        f"{iterations} calls per case (1 for 100,000-node graphs), OMP_NUM_THREADS=1. "
        "Every figure is a difference inside one process: the patched "
        "compute_dependencies' inclusive cost minus that of libtorch's, which it calls; "
        "'before'/'after' are the same graphs in the same process. Comparing two processes "
        "would mostly measure where the nodes were allocated (the walk hashes Node "
        "pointers), a few percent either way."
    )
    w(
        "- graphs: `chain` is one path of N nodes; `wide` is N/2 parallel leaf->mul "
        "branches under one stack; `chain_partial` is the chain walked as a partial pass "
        "(`torch.autograd.grad` to the node above the leaf: min_topo_nr 1, Note [The partial "
        "pass measured] in the benchmark); `cpu` graphs live on the CPU, `testaccel` graphs on "
        "testaccel:0 with a CPU leaf"
    )
    w("")
    w("## CPU-only process (the common case)")
    w("")
    w(
        "The library in a process without accelerator devices. Targets: at most +10% on "
        "compute_dependencies and +1% on the whole backward()."
    )
    w("")
    w("| case | libtorch's walk Ir/call | whole call Ir | added by the library Ir/call | added % |")
    w("| --- | ---: | ---: | ---: | ---: |")
    worst_deps = worst_backward = 0.0
    for what in ("compute_dependencies", "backward"):
        for k in keys("cpu_process", what):
            r = ir["cpu_process"][k]
            base = r["libtorch"] if what == "compute_dependencies" else r["total"] - r["added"]
            share = pct(base + r["added"], base)
            if what == "compute_dependencies":
                worst_deps = max(worst_deps, share)
            else:
                worst_backward = max(worst_backward, share)
            w(
                f"| {name(k)} | {r['libtorch']:,.0f} | {r['total']:,.0f} | {r['added']:+,.1f} | {share:+.3f}% |"
            )
    verdicts.append(
        f"CPU-only process: at most {worst_deps:+.3f}% on compute_dependencies "
        f"(target +10%), {worst_backward:+.3f}% on backward() (target +1%): "
        + ("met" if worst_deps <= 10 and worst_backward <= 1 else "MISSED")
    )
    w("")
    w("## Process with an accelerator: before and after the events fired")
    w("")
    w(
        "The test accelerator is loaded, so passes are classified. 'before': no event has "
        "fired; a CPU graph is then read to its end (the multi-device question stays open), "
        "the worst case. 'after': both fired; target at most 20 instructions per pass and "
        "none per node."
    )
    w("")
    w(
        "Per node divides by the nodes the walk visits, root included (a `testaccel` graph "
        "has a ToCopyBackward per CPU leaf on top of its nominal size)."
    )
    w("")
    w(
        "| case | graph nodes | libtorch's walk Ir/call | before: added Ir/call | "
        "before: added Ir/node | before: added % of walk | after: added Ir/call |"
    )
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    worst_after = worst_node = 0.0
    for k in keys("accel_process", "compute_dependencies"):
        before = ir["accel_process"][k]
        after = ir["accel_process"][k[:4] + ("after",)]
        worst_after = max(worst_after, after["added"])
        per_node = before["added"] / before["graph_nodes"]
        if k[3] >= 1000:
            worst_node = max(worst_node, per_node)
        w(
            f"| {name(k)} | {before['graph_nodes']:,} | {before['libtorch']:,.0f} | "
            f"{before['added']:+,.1f} | {per_node:+.2f} | "
            f"{pct(before['ours'], before['libtorch']):+.2f}% | {after['added']:+,.1f} |"
        )
    verdicts.append(
        f"after both events fired: at most {worst_after:.1f} added instructions "
        "per pass whatever the graph size (target 20, none per node): "
        + ("met" if worst_after <= 20 else "MISSED")
    )
    verdicts.append(
        f"per node before firing, graphs of 1,000+ nodes: at most {worst_node:.2f} added "
        "instructions per node (target 18): " + ("met" if worst_node <= 18 else "MISSED")
    )
    # Note [The per-pass constant]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # A pass costs a + b * nodes; with two
    # graph sizes of the same shape and placement, b is the slope between
    # them and a what is left of the smaller one.
    w("")
    w("### The per-pass constant")
    w("")
    w(
        "What a pass costs before firing whatever its size, in a process with an "
        "accelerator: the intercept of the added instructions between the smallest and the "
        "next graph size of each case (the engine seam's own cost, the 'after' column, "
        "included). Target: at most 60."
    )
    w("")
    w("| case | per node Ir | per pass Ir |")
    w("| --- | ---: | ---: |")
    worst_constant = 0.0
    seen = set()
    for k in keys("accel_process", "compute_dependencies"):
        if k[1:3] in seen:
            continue
        seen.add(k[1:3])
        sizes = sorted(kk for kk in ir["accel_process"] if kk[:3] == k[:3] and kk[4] == "before")[
            :2
        ]
        (s0, s1) = (ir["accel_process"][kk] for kk in sizes)
        slope = (s1["added"] - s0["added"]) / (s1["graph_nodes"] - s0["graph_nodes"])
        constant = s0["added"] - slope * s0["graph_nodes"]
        worst_constant = max(worst_constant, constant)
        w(f"| compute_dependencies/{k[1]}/{k[2]} | {slope:+.2f} | {constant:+.1f} |")
    verdicts.append(
        f"per-pass constant in a process with an accelerator: at most {worst_constant:.1f} "
        "instructions (target 60): " + ("met" if worst_constant <= 60 else "MISSED")
    )
    if upstream:
        w("")
        w(f"## Side by side with upstream's implementation (torch {upstream['torch']})")
        w("")
        w(
            "Per-node cost of classifying before the events fired, on compute_dependencies of "
            "CPU graphs in a process with the test accelerator: (Ir before firing - Ir after "
            "firing) / nodes, same graphs, same process. Upstream: libtorch's own "
            f"compute_dependencies in stock torch {upstream['torch']}. Ours: the instructions "
            f"the library adds, on torch {pinned['torch']}, and (built only for this "
            f"comparison, on top of upstream's own logging) on {upstream['torch']}."
        )
        w("")
        w(
            f"| case | upstream {upstream['torch']} Ir/node | ours on {pinned['torch']} Ir/node "
            f"| ours on {upstream['torch']} Ir/node |"
        )
        w("| --- | ---: | ---: | ---: |")
        ours_worse, partial_worse = [], []
        for k in keys("accel_process", "compute_dependencies", placement="cpu"):
            n = ir["accel_process"][k]["graph_nodes"]
            up_b = ir["upstream_stock"][k]["libtorch"]
            up_a = ir["upstream_stock"][k[:4] + ("after",)]["libtorch"]
            ours_b = ir["accel_process"][k]["added"]
            ours_a = ir["accel_process"][k[:4] + ("after",)]["added"]
            o2_b = ir["upstream_ours"][k]["added"]
            o2_a = ir["upstream_ours"][k[:4] + ("after",)]["added"]
            up_node, ours_node = (up_b - up_a) / n, (ours_b - ours_a) / n
            if n >= 1000 and ours_node > up_node:
                (partial_worse if k[1].endswith("_partial") else ours_worse).append(name(k))
            w(f"| {name(k)} | {up_node:+.2f} | {ours_node:+.2f} | {(o2_b - o2_a) / n:+.2f} |")
        verdicts.append(
            "per node before firing, full passes, ours vs upstream (graphs of 1,000+ nodes): "
            + (
                "ours no more than upstream's"
                if not ours_worse
                else "ours MORE than upstream's on " + ", ".join(ours_worse)
            )
        )
        w("")
        w("### Small graphs vs upstream")
        w("")
        w(
            "What a whole pass costs before firing, at every graph size, CPU and testaccel "
            "graphs: upstream's classification (libtorch's compute_dependencies before firing "
            "minus after firing, stock torch "
            f"{upstream['torch']}) against everything the library adds on the pinned torch "
            "(its 'before' column above, the seam included). Target: ours no more than "
            "upstream's, 10 nodes included."
        )
        w("")
        w(f"| case | upstream {upstream['torch']} Ir/pass | ours Ir/pass | verdict |")
        w("| --- | ---: | ---: | --- |")
        small_worse = []
        for k in keys("accel_process", "compute_dependencies"):
            up_pass = (
                ir["upstream_stock"][k]["libtorch"]
                - ir["upstream_stock"][k[:4] + ("after",)]["libtorch"]
            )
            ours_pass = ir["accel_process"][k]["added"]
            ok = ours_pass <= up_pass
            if not ok:
                small_worse.append(name(k))
            w(
                f"| {name(k)} | {up_pass:+,.1f} | {ours_pass:+,.1f} | "
                + ("ours no more" if ok else "OURS MORE")
                + " |"
            )
        verdicts.append(
            "small graphs vs upstream, per pass before firing at every size (10 nodes "
            "included), CPU and testaccel graphs: "
            + (
                "ours no more than upstream's"
                if not small_worse
                else "ours MORE than upstream's on " + ", ".join(small_worse)
            )
        )
        verdicts.append(
            "per node before firing, partial passes (`chain_partial`, min_topo_nr 1), ours vs "
            "upstream (1,000+ nodes): "
            + (
                "ours no more than upstream's"
                if not partial_worse
                else "ours MORE than upstream's on " + ", ".join(partial_worse)
            )
        )
    w("")
    lines[4:4] = ["## Verdicts", ""] + [f"- {v}" for v in verdicts] + [""]
    # The sections of benchmarks/gpu_wall_clock.py (on a machine with NVIDIA
    # GPUs) and benchmarks/threading_measurement_overhead.py; keep them.
    kept = []
    if os.path.exists(args.output):
        old = open(args.output).read()
        for marker in ("gpu-wall-clock", "threading-measurement-overhead"):
            found = re.search(r"<!-- %s -->.*?<!-- /%s -->\n?" % (marker, marker), old, re.S)
            if found:
                kept.append(found.group(0))
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    doc_sections.write_whole(
        args.output,
        "\n".join(["<!-- performance -->", *lines, "<!-- /performance -->"]),
        "\n".join(kept),
    )
    doc_sections.replace_section(
        args.output, "wall-time", wall_section(wall, args.rounds, args, pinned)
    )
    print("\n".join(lines))
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
