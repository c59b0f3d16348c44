"""The models benchmarks/threading_cost.py measures, built in its children."""

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
