"""One backward-pass scenario, run by demo/run_demo.py in its own process.

    python -m autograd_device_logging demo/backward_device_scenarios.py SCENARIO BACKEND [STEPS]

BACKEND is "cuda" (real GPUs) or "testaccel" (the two-device test
accelerator). STEPS (default 1) repeats the training step, forward and
backward, on the same model and input. Prints the gradients' checksum; the events go to stderr through
PYTORCH_API_USAGE_STDERR=1.
"""

import os
import sys

import torch

SCENARIOS = {
    # name: (devices the forward pass uses, expected events)
    "cpu_only": (["cpu"], []),
    "device0_alone": (["dev0"], []),
    "device0_and_cpu": (["dev0", "cpu"], ["torch.autograd.gpu_cpu_backward"]),
    "device0_and_device1": (["dev0", "dev1"], ["torch.autograd.multidevice_backward"]),
    "device0_device1_and_cpu": (
        ["dev0", "dev1", "cpu"],
        ["torch.autograd.multidevice_backward", "torch.autograd.gpu_cpu_backward"],
    ),
}


def devices_for(backend):
    if backend == "cuda":
        return {"dev0": torch.device("cuda", 0), "dev1": torch.device("cuda", 1)}
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test"))
    import autograd_test_accelerator

    d0, d1 = autograd_test_accelerator.load()
    return {"dev0": d0, "dev1": d1}


def run(scenario, backend, steps=1):
    names, _ = SCENARIOS[scenario]
    devices = devices_for(backend) if names != ["cpu"] else {}
    devices["cpu"] = torch.device("cpu")
    placed = [devices[n] for n in names]
    torch.manual_seed(0)
    # A three-layer MLP; layer k lives on placed[k % len(placed)], and the
    # parameters are leaves on their layer's device.
    sizes = [32, 64, 64, 8]
    layers = []
    for k in range(3):
        device = placed[k % len(placed)]
        layers.append(torch.nn.Linear(sizes[k], sizes[k + 1]).to(device))
    x = torch.randn(16, sizes[0])
    for _ in range(steps):
        for layer in layers:
            layer.zero_grad(set_to_none=True)
        h = x
        for k, layer in enumerate(layers):
            h = layer(h.to(placed[k % len(placed)]))
            if k < 2:
                h = torch.relu(h)
        loss = h.pow(2).mean().to(placed[0])
        loss.backward()
    checksum = sum(p.grad.double().abs().sum().item() for l in layers for p in l.parameters())
    print(f"grad checksum {checksum:.6f}")


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    if "autograd_device_logging" in sys.modules:  # the record, before os._exit
        sys.modules["autograd_device_logging"].write_process_record()
    # Stock PyTorch can abort at interpreter exit while an autograd device
    # thread is still starting (it asks for the GIL during finalization);
    # leave without finalizing so the demo reports on the backward pass only.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
