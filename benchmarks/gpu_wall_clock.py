"""Wall-clock cost of classifying on real GPUs, measured in one process.

    python3 benchmarks/gpu_wall_clock.py [--passes N] [--output docs/performance.md]

Runs on a machine with NVIDIA GPUs. Builds the library with the
benchmark-only switch (CMake AUTOGRAD_DEVICE_LOGGING_BENCHMARK_SWITCH=ON,
Note [Timing both in one process]) against the torch of this interpreter,
into $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR (default build-gpu-wall-clock/), loads
it ahead of torch, and times backward() of each model with classification on
and off, alternating pass by pass in the same process, on the same model and
inputs. Each pass: forward, synchronize, then time backward() up to the
synchronize after it. Before any event fires, every pass of these models is
read in full (a one-GPU model never fires either event; the two-GPU one fires
multidevice_backward on its first pass and then stays open on
gpu_cpu_backward), so the classified passes are the steady-state worst case.

The section it writes goes between the gpu-wall-clock markers of
docs/performance.md, which benchmarks/run_benchmarks.py keeps when it rewrites
the rest.
"""

import argparse
import collections
import ctypes
import datetime
import os
import statistics
import sys
import time

import doc_sections

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "gpu-wall-clock"


def build_library():
    return doc_sections.build_library(
        "build-gpu-wall-clock",
        "-DAUTOGRAD_DEVICE_LOGGING_BENCHMARK_SWITCH=ON -DAUTOGRAD_DEVICE_LOGGING_BUILD_TESTS=OFF",
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=300, help="timed passes per setting")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "performance.md"))
    args = parser.parse_args()

    sys.path.insert(0, build_library())
    import autograd_device_logging as adl  # ahead of torch, as users load it

    import torch

    lib = adl._activation.library()
    set_classifying = lib.autograd_device_logging_set_classifying_for_benchmark
    nodes_inspected = lib.autograd_device_logging_nodes_inspected
    nodes_inspected.restype = ctypes.c_uint64
    gpus = torch.cuda.device_count()
    if gpus == 0:
        sys.exit("needs a CUDA device")

    def mlp(layers, devices):
        """`layers` small Linear+ReLU blocks, split evenly over `devices`."""
        blocks = []
        for i in range(layers):
            device = devices[i * len(devices) // layers]
            blocks.append(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).to(device))

        def step(x):
            for block in blocks:
                x = block(x.to(next(block.parameters()).device))
            return x.sum()

        return step, torch.randn(32, 64, device=devices[0])

    def transformer(device):
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).to(device)

        def step(x):
            return model(x).float().pow(2).mean()

        return step, torch.randn(16, 128, 512, device=device)

    models = [
        ("launch-bound MLP, 300 Linear+ReLU blocks, cuda:0", *mlp(300, ["cuda:0"])),
        (
            "Transformer encoder, 6 layers, d_model 512, batch 16x128, cuda:0",
            *transformer("cuda:0"),
        ),
    ]
    if gpus >= 2:
        models.insert(
            1,
            (
                "launch-bound MLP, 300 blocks split over cuda:0 and cuda:1",
                *mlp(300, ["cuda:0", "cuda:1"]),
            ),
        )

    def timed_backward(step, x, classifying):
        set_classifying(1 if classifying else 0)
        loss = step(x)
        torch.cuda.synchronize()
        before = nodes_inspected()
        # Host time: the classification runs on the CPU, before any kernel.
        t0 = time.perf_counter()
        loss.backward()
        for d in range(gpus):
            torch.cuda.synchronize(d)
        elapsed = time.perf_counter() - t0
        return elapsed, nodes_inspected() - before

    rows = []
    for name, step, x in models:
        for _ in range(20):  # warm up: allocator, cuBLAS handles, first events
            timed_backward(step, x, True)
            timed_backward(step, x, False)
        on, off, read = [], [], []
        for i in range(args.passes):
            # Alternate which setting goes first, so neither always follows
            # the other.
            order = (True, False) if i % 2 == 0 else (False, True)
            for classifying in order:
                seconds, inspected = timed_backward(step, x, classifying)
                if classifying:
                    on.append(seconds)
                    read.append(inspected)
                else:
                    off.append(seconds)
                    if inspected != 0:
                        sys.exit("the switch did not stop classification")
        if min(read) == 0:
            sys.exit(f"{name}: a classified pass read no node")
        diffs = [a - b for a, b in zip(on, off)]
        rows.append((name, statistics.median(read), on, off, diffs))
        print(name, statistics.median(on) * 1e6, statistics.median(off) * 1e6, flush=True)

    def us(v):
        return f"{v * 1e6:,.1f}"

    def quartiles(v):
        q = statistics.quantiles(v, n=4)
        return f"{us(q[0])} – {us(q[2])}"

    names = "; ".join(
        f"{c} x {n}"
        for n, c in collections.Counter(torch.cuda.get_device_name(i) for i in range(gpus)).items()
    )
    lines = [
        f"<!-- {MARKER} -->",
        "## Wall clock on GPUs, one process",
        "",
        f"Written by `python3 benchmarks/gpu_wall_clock.py` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit "
        f"{doc_sections.commit()}, on a machine with "
        f"NVIDIA GPUs ({names}), torch {torch.__version__}.",
        "",
        f"Each model ran {args.passes} backward passes with classification and {args.passes} "
        "without, alternating in one process (the library's benchmark-only switch, "
        "Note [Timing both in one process]); times are host wall clock from backward() to "
        "the synchronize after it, in microseconds. No event fires in these passes except "
        "multidevice_backward on the two-GPU model's first (warm-up) pass, so every timed "
        "classified pass reads its whole graph.",
        "",
        "| model | nodes read per pass | classified: median (IQR) | unclassified: median (IQR) "
        "| paired difference: median (IQR) | difference / unclassified |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, read, on, off, diffs in rows:
        lines.append(
            f"| {name} | {read:,.0f} | {us(statistics.median(on))} ({quartiles(on)}) | "
            f"{us(statistics.median(off))} ({quartiles(off)}) | "
            f"{us(statistics.median(diffs))} ({quartiles(diffs)}) | "
            f"{statistics.median(diffs) / statistics.median(off) * 100:+.2f}% |"
        )
    lines += [f"<!-- /{MARKER} -->", ""]
    section = "\n".join(lines)
    doc_sections.replace_section(args.output, MARKER, section)
    print(section)


if __name__ == "__main__":
    main()
