# Owner(s): ["module: autograd"]
"""End-to-end tests of autograd device logging from Python.

The events are once per process, so every case runs its program in a fresh
interpreter (with PYTORCH_API_USAGE_STDERR=1) and inspects what it printed;
nothing here resets the library's state. The library comes from the CMake
build in $AUTOGRAD_DEVICE_LOGGING_BUILD_DIR (default: <repo>/build).
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from common_device_logging import (
    ACCELERATOR_LIBRARY,
    BUILD_DIR,
    EVENTS,
    EXIT_NOW,
    IMPORT_TEST_ACCELERATOR,
    LIBRARY,
    PACKAGE_ROOT,
    SANITIZER_PRELOAD,
    TORCH_LOGS_EVENTS,
    WITH_TEST_ACCELERATOR,
    autograd_events,
    one_node_torchrun,
    require_built,
    run_child,
    run_code,
    skip_where_torch_logs_events,
)
from torch.testing._internal.common_utils import TestCase, run_tests

import torch

OTHER_TORCH_LIBRARY = os.path.join(
    BUILD_DIR, "test", "for_other_torch", "libautograd_device_logging.so"
)
# Builds of the same release that were told another torch build made them
# (test/CMakeLists.txt): another commit and version, the other string ABI.
OTHER_BUILD_LIBRARY = os.path.join(
    BUILD_DIR, "test", "for_other_build", "libautograd_device_logging.so"
)
OTHER_ABI_LIBRARY = os.path.join(
    BUILD_DIR, "test", "for_other_abi", "libautograd_device_logging.so"
)
RUNNING_ABI = int(torch._C._GLIBCXX_USE_CXX11_ABI)
ABI_NAMES = {0: "pre-C++11 string ABI", 1: "C++11 string ABI"}
# A build that looks for a compute_dependencies libtorch does not define.
WITHOUT_DEFINITION_LIBRARY = os.path.join(
    BUILD_DIR, "test", "without_libtorch_definition", "libautograd_device_logging.so"
)
# The Python package's warning for an import after torch, and the library's
# own (C++) warning when another definition comes first in the global lookup
# order; each must be told apart from the other.
LATE_IMPORT_WARNING = (
    "autograd_device_logging: imported after torch: libtorch "
    "bound Engine::compute_dependencies to its own definition when torch was "
    "imported, so backward passes in this process are not logged."
)
LOOKUP_ORDER_WARNING = "autograd_device_logging: loaded, but the first Engine::compute_dependencies"

# A CPU-only model whose gradients the cases compare bitwise.
CPU_MODEL = """
import torch
torch.manual_seed(0)
lin1 = torch.nn.Linear(8, 16)
lin2 = torch.nn.Linear(16, 4)
x = torch.randn(5, 8)
loss = lin2(torch.relu(lin1(x))).pow(2).mean()
loss.backward()
grads = [p.grad for p in (*lin1.parameters(), *lin2.parameters())]
"""

STATUS_JSON = """
import json, dataclasses, autograd_device_logging as adl
s = dataclasses.asdict(adl.status())
s["events_raised"] = sorted(s["events_raised"])
print("STATUS " + json.dumps(s))
"""


class TestAutogradDeviceLogging(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def saved_grads(self, name, **kwargs):
        """Runs CPU_MODEL in a child and returns its gradients and result."""
        path = os.path.join(self.tmp.name, name + ".pt")
        prologue = kwargs.pop("prologue", "")
        body = "" if "grads = " in prologue else CPU_MODEL
        code = prologue + body + f"torch.save(grads, {path!r})\n"
        if kwargs.pop("with_status", True):
            code += STATUS_JSON
        result = run_code(code, **kwargs)
        self.assertEqual(result.returncode, 0, result.stderr)
        return torch.load(path), result

    def assert_same_grads(self, a, b):
        self.assertEqual(len(a), len(b))
        for x, y in zip(a, b):
            self.assertTrue(torch.equal(x, y))

    @skip_where_torch_logs_events
    def test_stock_torch_cannot_emit_the_events(self):
        # The control: the pinned libtorch has no such event at all...
        lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        with open(lib, "rb") as f:
            data = f.read()
        for event in EVENTS:
            self.assertNotIn(event.encode(), data)
        # ...and a backward without the library prints none.
        _, result = self.saved_grads("stock", with_package=False, with_status=False)
        self.assertEqual(result.events, [])

    def test_cpu_backward_is_active_silent_and_bitwise_unchanged(self):
        stock, _ = self.saved_grads("stock", with_package=False, with_status=False)
        # No GPU visible, also on a machine with GPUs: a CPU-only process.
        patched, result = self.saved_grads(
            "patched",
            prologue="import autograd_device_logging\n",
            env_extra={"CUDA_VISIBLE_DEVICES": ""},
        )
        self.assert_same_grads(stock, patched)
        self.assertTrue(result.status["active"])
        self.assertIsNone(result.status["disabled_reason"])
        self.assertEqual(result.status["events_raised"], [])
        self.assertEqual(result.events, [])
        self.assertEqual(result.status["built_for_torch"], torch.__version__.split("+")[0])
        # No accelerator in a CPU-only process: nothing was read.
        self.assertEqual(result.status["nodes_inspected"], 0)

    def test_import_after_torch_is_detected_and_harmless(self):
        stock, _ = self.saved_grads("stock", with_package=False, with_status=False)
        late, result = self.saved_grads(
            "late", prologue="import torch\nimport autograd_device_logging\n"
        )
        self.assert_same_grads(stock, late)
        self.assertFalse(result.status["active"])
        # The package's warning, once. The library's own lookup-order check
        # sees only the global scope, where torch's extension did not put
        # libtorch_cpu, so it has nothing to say here.
        self.assertEqual(result.stderr.count(LATE_IMPORT_WARNING), 1, result.stderr)
        self.assertNotIn(LOOKUP_ORDER_WARNING, result.stderr)

    def test_launcher_runs_a_script_with_the_library_active(self):
        script = os.path.join(self.tmp.name, "train.py")
        with open(script, "w") as f:
            f.write(
                CPU_MODEL + STATUS_JSON + "import sys\nprint('ARGS', sys.argv[1:])\n" + EXIT_NOW
            )
        result = run_child(["-m", "autograd_device_logging", script, "--lr", "0.1"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.status["active"])
        self.assertIn("ARGS ['--lr', '0.1']", result.stdout)

    def test_launcher_runs_a_module(self):
        pkg = os.path.join(self.tmp.name, "mypkg")
        os.makedirs(pkg)
        with open(os.path.join(pkg, "__init__.py"), "w") as f:
            f.write("")
        with open(os.path.join(pkg, "train.py"), "w") as f:
            f.write(CPU_MODEL + STATUS_JSON + EXIT_NOW)
        result = run_child(
            ["-m", "autograd_device_logging", "-m", "mypkg.train"],
            env_extra={"PYTHONPATH": PACKAGE_ROOT + os.pathsep + self.tmp.name},
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.status["active"])

    def test_check_reports_active_and_versions(self):
        result = run_child(["-m", "autograd_device_logging", "--check"])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        version = torch.__version__.split("+")[0]
        self.assertIn(f"built for torch:  {version}", result.stdout)
        self.assertIn(f"running torch:    {version}", result.stdout)
        self.assertIn("active:           yes", result.stdout)

    def test_ld_preload_activates_and_is_not_inherited(self):
        code = (
            CPU_MODEL
            + STATUS_JSON
            + textwrap.dedent(
                """
            import os, subprocess, sys
            print("PARENT_PRELOAD", repr(os.environ.get("LD_PRELOAD")))
            child = subprocess.run(
                [sys.executable, "-c", "import os; print(repr(os.environ.get('LD_PRELOAD')))"],
                capture_output=True, text=True)
            print("CHILD_PRELOAD", child.stdout.strip())
            """
            )
        )
        result = run_code(code, env_extra={"LD_PRELOAD": LIBRARY})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.status["active"])
        # Only the library's own entry goes (a sanitizer runtime stays).
        remaining = repr(SANITIZER_PRELOAD or None)
        self.assertIn(f"PARENT_PRELOAD {remaining}", result.stdout)
        self.assertIn(f"CHILD_PRELOAD {remaining}", result.stdout)

    def test_ld_preload_keeps_other_entries(self):
        libm = "libm.so.6"
        code = "import os; print('PRELOAD', os.environ.get('LD_PRELOAD'))"
        result = run_code(
            code,
            env_extra={"LD_PRELOAD": f"{libm}:{LIBRARY} {libm}"},
            with_package=False,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        first = f"{SANITIZER_PRELOAD}:" if SANITIZER_PRELOAD else ""
        self.assertIn(f"PRELOAD {first}{libm}:{libm}", result.stdout)

    def test_real_models_gradients_are_bitwise_identical(self):
        models = textwrap.dedent(
            """
            import torch
            torch.manual_seed(0)
            cnn = torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                torch.nn.Conv2d(8, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(10))
            block = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                                     dropout=0.0, batch_first=True)
            lstm = torch.nn.LSTM(16, 24, num_layers=2, batch_first=True)
            images, tokens, sequence = torch.randn(4, 3, 16, 16), torch.randn(2, 7, 32), torch.randn(3, 5, 16)
            cnn(images).logsumexp(1).mean().backward()
            block(tokens).pow(2).mean().backward()
            out, (h, c) = lstm(sequence)
            (out.sum() + h.pow(2).sum()).backward()
            grads = [p.grad for m in (cnn, block, lstm) for p in m.parameters()]
            """
        )
        stock, _ = self.saved_grads("stock", prologue=models, with_package=False, with_status=False)
        patched, result = self.saved_grads(
            "patched", prologue="import autograd_device_logging\n" + models
        )
        self.assertGreater(len(stock), 20)
        self.assert_same_grads(stock, patched)
        self.assertTrue(result.status["active"])

    def test_silent_without_pytorch_api_usage_stderr(self):
        result = run_code(
            "import autograd_device_logging\n" + CPU_MODEL + STATUS_JSON,
            env_extra={"PYTORCH_API_USAGE_STDERR": None},
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.status["active"])
        self.assertEqual(result.stderr.strip(), "")

    def test_library_without_libtorchs_definition_says_so_at_load(self):
        # Note [When libtorch's compute_dependencies cannot be found]: one
        # warning at load naming the cause, status says why, and a backward
        # that reaches the library fails with one clear error (no walk can
        # run without libtorch's definition), as docs/usage.md says.
        require_built(self, WITHOUT_DEFINITION_LIBRARY)
        result = run_code(
            "import autograd_device_logging, torch\n"
            + STATUS_JSON
            + textwrap.dedent(
                """
                try:
                    torch.ones(2, requires_grad=True).sum().backward()
                except RuntimeError as e:
                    print("BACKWARD_ERROR", str(e).splitlines()[0])
                """
            ),
            env_extra={"AUTOGRAD_DEVICE_LOGGING_LIBRARY": WITHOUT_DEFINITION_LIBRARY},
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(
            "libtorch's torch::autograd::Engine::compute_dependencies was not found",
            result.status["disabled_reason"],
        )
        self.assertEqual(result.stderr.count("autograd_device_logging: disabled: "), 1)
        self.assertIn(
            "BACKWARD_ERROR autograd_device_logging: libtorch's "
            "Engine::compute_dependencies could not be found; remove the library "
            "from this process.",
            result.stdout,
        )

    def test_library_built_for_another_torch_disables_itself(self):
        self.assertTrue(os.path.exists(OTHER_TORCH_LIBRARY), OTHER_TORCH_LIBRARY)
        stock, _ = self.saved_grads("stock", with_package=False, with_status=False)
        other, result = self.saved_grads(
            "other",
            prologue="import autograd_device_logging\n",
            env_extra={"AUTOGRAD_DEVICE_LOGGING_LIBRARY": OTHER_TORCH_LIBRARY},
        )
        self.assert_same_grads(stock, other)
        version = torch.__version__.split("+")[0]
        self.assertIn(
            f"built for torch 0.0.0 but this process runs torch {version}",
            result.status["disabled_reason"],
        )
        self.assertEqual(result.stderr.count("autograd_device_logging: disabled: "), 1)
        check = run_child(
            ["-m", "autograd_device_logging", "--check"],
            env_extra={"AUTOGRAD_DEVICE_LOGGING_LIBRARY": OTHER_TORCH_LIBRARY},
        )
        self.assertEqual(check.returncode, 1)
        self.assertIn("active:           no", check.stdout)
        self.assertIn("built for torch 0.0.0", check.stdout)

    def assert_other_build_disables_itself(self, library, line):
        # Note [A build runs only on the torch build it was made for]: the
        # same release, another build of it; one line naming both, and
        # gradients unchanged.
        require_built(self, library)
        stock, _ = self.saved_grads("stock", with_package=False, with_status=False)
        other, result = self.saved_grads(
            "other",
            prologue="import autograd_device_logging\n",
            env_extra={"AUTOGRAD_DEVICE_LOGGING_LIBRARY": library},
        )
        self.assert_same_grads(stock, other)
        self.assertIn(line, result.status["disabled_reason"])
        self.assertEqual(result.stderr.count("autograd_device_logging: disabled: "), 1)
        self.assertIn(line, result.stderr)

    def test_library_built_for_another_build_of_this_release_disables_itself(self):
        release = torch.__version__.split("+")[0]
        self.assert_other_build_disables_itself(
            OTHER_BUILD_LIBRARY,
            f"it was built for torch {release}a0+deadbeef (commit deadbeef, {ABI_NAMES[RUNNING_ABI]}) "
            f"but this process runs torch {torch.__version__} (commit "
            f"{torch.version.git_version[:12]}, {ABI_NAMES[RUNNING_ABI]}), another build of the "
            "same release.",
        )

    def test_library_built_for_the_other_string_abi_disables_itself(self):
        self.assert_other_build_disables_itself(
            OTHER_ABI_LIBRARY,
            f", {ABI_NAMES[1 - RUNNING_ABI]}) but this process runs torch {torch.__version__} "
            f"(commit {torch.version.git_version[:12]}, {ABI_NAMES[RUNNING_ABI]}), another "
            "build of the same release.",
        )


# A small MLP split across testaccel:0, testaccel:1 and the CPU, run on the
# devices and on the CPU alone; prints the largest gradient difference.
SPLIT_MLP = """
torch.manual_seed(0)
w1, b1 = torch.randn(8, 16), torch.randn(16)
w2, b2 = torch.randn(16, 16), torch.randn(16)
w3 = torch.randn(16, 4)
x = torch.randn(5, 8)

def loss_of(params, devices):
    w1, b1, w2, b2, w3 = params
    h = torch.tanh(x.to(devices[0]) @ w1.to(devices[0]) + b1.to(devices[0]))
    h = torch.relu(h.to(devices[1]) @ w2.to(devices[1]) + b2.to(devices[1]))
    return (h.to(devices[2]) @ w3).pow(2).mean()

def grads(devices):
    params = [p.clone().requires_grad_() for p in (w1, b1, w2, b2, w3)]
    loss_of(params, devices).backward()
    return [p.grad for p in params]

split = grads([d0, d1, "cpu"])
reference = grads(["cpu", "cpu", "cpu"])
print("MAXDIFF", max((a - b).abs().max().item() for a, b in zip(split, reference)))
print("ALL_ON_CPU", all(g.device.type == "cpu" for g in split))
"""


class TestWithTestAccelerator(TestCase):
    """Real multi-device passes on the two-device test accelerator."""

    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)

    def run_scenario(self, code, expect_success=True):
        result = run_code(WITH_TEST_ACCELERATOR + textwrap.dedent(code) + STATUS_JSON)
        if expect_success:
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertTrue(result.status["active"], result.stderr)
        return result

    def test_split_mlp_gradients_match_the_cpu_reference(self):
        result = self.run_scenario(SPLIT_MLP)
        maxdiff = float(result.stdout.split("MAXDIFF ")[1].split()[0])
        self.assertLess(maxdiff, 1e-5)
        self.assertIn("ALL_ON_CPU True", result.stdout)
        self.assertEqual(sorted(result.events), sorted(EVENTS))

    def test_device_and_cpu_give_gpu_cpu_only(self):
        result = self.run_scenario(
            """
            x = torch.ones(3, requires_grad=True)
            (x.to(d0) * 2).sum().backward()
            assert torch.equal(x.grad, torch.full((3,), 2.0))
            """
        )
        self.assertEqual(result.events, ["torch.autograd.gpu_cpu_backward"])

    def test_one_device_alone_gives_nothing(self):
        result = self.run_scenario(
            """
            x = torch.arange(1.0, 5.0, device=d0).requires_grad_()
            (x * x).sum().backward()
            assert torch.equal(x.grad.cpu(), 2 * torch.arange(1.0, 5.0))
            """
        )
        self.assertEqual(result.events, [])
        self.assertGreater(result.status["nodes_inspected"], 0)

    def test_two_devices_give_multidevice_only(self):
        result = self.run_scenario(
            """
            a = torch.ones(4, device=d0, requires_grad=True)
            b = torch.ones(4, device=d1, requires_grad=True)
            ((a * 2).sum() + (b * 3).sum().to(d0)).backward()
            """
        )
        self.assertEqual(result.events, ["torch.autograd.multidevice_backward"])

    def test_two_devices_and_cpu_give_both_in_one_pass(self):
        result = self.run_scenario(
            """
            a = torch.ones(4, requires_grad=True)
            ((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward()
            print("BOTH_AFTER_ONE_PASS", len(autograd_device_logging.status().events_raised))
            """
        )
        self.assertIn("BOTH_AFTER_ONE_PASS 2", result.stdout)
        self.assertEqual(sorted(result.events), sorted(EVENTS))

    def test_repeated_passes_give_each_event_once(self):
        result = self.run_scenario(
            """
            for _ in range(20):
                a = torch.ones(4, requires_grad=True)
                (a.to(d0) * 2).sum().backward()
                b = torch.ones(4, device=d0, requires_grad=True)
                (b * torch.ones(4, device=d1).to(d0)).sum().backward()
                c = torch.ones(4, device=d1, requires_grad=True)
                (c.to(d0) * 3).sum().backward()
            """
        )
        self.assertEqual(result.events.count("torch.autograd.multidevice_backward"), 1)
        self.assertEqual(result.events.count("torch.autograd.gpu_cpu_backward"), 1)
        self.assertEqual(len(result.events), 2)

    def test_after_both_fired_many_passes_inspect_nothing(self):
        result = self.run_scenario(
            """
            a = torch.ones(4, requires_grad=True)
            ((a.to(d0)).sum() + a.to(d1).sum().to(d0)).backward()
            before = autograd_device_logging.status().nodes_inspected
            for _ in range(500):
                x = torch.ones(2, requires_grad=True)
                ((x.to(d1) * 3).to(d0).sum() + x.sum().to(d0)).backward()
            print("INSPECTED_AFTER_BOTH", autograd_device_logging.status().nodes_inspected - before)
            """
        )
        self.assertIn("INSPECTED_AFTER_BOTH 0", result.stdout)

    def test_grad_on_a_partial_graph_classifies_only_the_walked_part(self):
        # z lives on testaccel:0 but depends on a CPU leaf; grad(loss, z) walks
        # only the part above z, which is all on testaccel:0.
        result = self.run_scenario(
            """
            x = torch.ones(4, requires_grad=True)
            z = x.to(d0) * 2
            loss = (z * z).sum()
            (gz,) = torch.autograd.grad(loss, z, retain_graph=True)
            assert torch.equal(gz.cpu(), torch.full((4,), 4.0))
            s = autograd_device_logging.status()
            print("AFTER_PARTIAL", sorted(s.events_raised), s.nodes_inspected > 0)
            loss.backward()
            """
        )
        # Nothing emitted, and the hook did read the partial pass.
        self.assertIn("AFTER_PARTIAL [] True", result.stdout)
        # The full pass does reach the CPU leaf.
        self.assertEqual(result.events, ["torch.autograd.gpu_cpu_backward"])

    def test_grad_to_an_input_on_another_device_emits(self):
        # Partial passes that must emit: the inputs sit on other devices than
        # the root, so the part of the graph they need spans both. The inputs
        # are not leaves, so the walk gets min_topo_nr > 0 (a leaf's
        # AccumulateGrad has topological_nr 0, which would make it 0).
        result = self.run_scenario(
            """
            x = torch.ones(3, requires_grad=True)
            h = x * 3
            out = (h.to(d0) * 2).sum()
            (gh,) = torch.autograd.grad(out, [h])
            assert torch.equal(gh, torch.full((3,), 2.0))
            print("AFTER_GRAD", sorted(autograd_device_logging.status().events_raised))
            a = torch.ones(3, device=d0, requires_grad=True)
            b = torch.ones(3, device=d1, requires_grad=True)
            bh = b * 3
            bh.retain_grad()
            ((a * 2).sum() + (bh * 5).sum().to(d0)).backward(inputs=[bh])
            assert a.grad is None and b.grad is None
            assert torch.equal(bh.grad.cpu(), torch.full((3,), 5.0))
            """
        )
        self.assertIn("AFTER_GRAD ['torch.autograd.gpu_cpu_backward']", result.stdout)
        self.assertEqual(
            result.events,
            ["torch.autograd.gpu_cpu_backward", "torch.autograd.multidevice_backward"],
        )

    def test_node_below_min_topo_nr_on_another_device_is_not_counted(self):
        # Note [Nodes below min_topo_nr are not part of the pass]. grad(out,
        # [w1]) walks down to w1's ToCopyBackward (testaccel:0) and reaches
        # MulBackward0 of z * 2 below it, the only node on testaccel:1, which
        # never runs. torch's own events (2.14+) do not count it; neither
        # may this library.
        result = self.run_scenario(
            """
            z = torch.randn(3, device=d1, requires_grad=True)
            c = torch.randn(3, device=d0, requires_grad=True)
            w1 = (z * 2).to(d0)
            out = (w1 * c).sum()
            (gw,) = torch.autograd.grad(out, [w1])
            assert torch.equal(gw.cpu(), c.detach().cpu())
            s = autograd_device_logging.status()
            print("PARTIAL", sorted(s.events_raised), s.nodes_inspected > 0)
            """
        )
        self.assertIn("PARTIAL [] True", result.stdout)
        self.assertEqual(result.events, [])

    def test_multithreading_disabled_still_classifies_by_routing(self):
        # With multithreading off, the engine runs every node on the calling
        # thread, but the pass still spans the same devices; the events say
        # what the graph would need from a multithreaded engine.
        result = self.run_scenario(
            """
            with torch.autograd.set_multithreading_enabled(False):
                a = torch.ones(4, requires_grad=True)
                ((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward()
            assert torch.equal(a.grad, torch.full((4,), 5.0))
            """
        )
        self.assertEqual(sorted(result.events), sorted(EVENTS))

    def test_reentrant_checkpoint_pass_is_classified(self):
        # The outer pass is on testaccel:0 only; the checkpointed segment
        # crosses to testaccel:1, which only its reentrant backward walks.
        result = self.run_scenario(
            """
            from torch.utils.checkpoint import checkpoint
            x = torch.ones(4, device=d0, requires_grad=True)
            y = checkpoint(lambda t: (t.to(d1) * 3).to(d0), x, use_reentrant=True)
            (y * 2).sum().backward()
            assert torch.equal(x.grad.cpu(), torch.full((4,), 6.0))
            """
        )
        self.assertEqual(result.events, ["torch.autograd.multidevice_backward"])

    @skip_where_torch_logs_events
    def test_control_without_the_library_emits_nothing(self):
        result = run_code(
            WITH_TEST_ACCELERATOR.replace("import autograd_device_logging, sys", "import sys")
            + textwrap.dedent(
                """
                a = torch.ones(4, requires_grad=True)
                ((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward()
                print("GRAD", a.grad.tolist())
                """
            ),
            with_package=False,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("GRAD [5.0, 5.0, 5.0, 5.0]", result.stdout)
        self.assertEqual(result.events, [])

    @skip_where_torch_logs_events
    def test_classifier_fault_disables_once_and_backward_is_unchanged(self):
        # The test seam makes every classification throw a c10::Error; with
        # Python warnings turned into errors, the library must still only
        # disable itself, warn once on stderr, and leave every gradient alone.
        result = self.run_scenario(
            """
            import ctypes, warnings
            lib = ctypes.CDLL(autograd_device_logging.library_path())
            assert lib.autograd_device_logging_inject_classifier_fault_for_testing(1) == 0
            warnings.simplefilter("error")
            for _ in range(5):
                x = torch.arange(1.0, 5.0, requires_grad=True)
                ((x.to(d0) * x.to(d0)).sum() + (x.to(d1) * 3).sum().to(d0)).backward()
                assert torch.equal(x.grad, 2 * torch.arange(1.0, 5.0) + 3), x.grad
            lib.autograd_device_logging_inject_classifier_fault_for_testing(0)
            x = torch.arange(1.0, 5.0, requires_grad=True)
            ((x.to(d0) * x.to(d0)).sum() + (x.to(d1) * 3).sum().to(d0)).backward()
            print("GRADS_OK")
            """
        )
        self.assertIn("GRADS_OK", result.stdout)
        self.assertEqual(result.events, [])
        self.assertEqual(
            result.stderr.count("autograd_device_logging: disabled: "), 1, result.stderr
        )
        self.assertIn("injected classifier fault", result.status["disabled_reason"])
        self.assertNotIn("Exception raised from", result.status["disabled_reason"])
        self.assertEqual(result.status["nodes_inspected"], 0)

    def test_fork_after_both_fired_child_keeps_once_semantics(self):
        # The child inherits the fired state: it must not log again, inspect
        # nothing, and finish (an alarm turns a deadlock into a failure).
        # Whether its own backward may run is libtorch's rule: it refuses
        # autograd in a child forked after its device threads started.
        result = self.run_scenario(
            """
            import os, signal
            a = torch.ones(4, requires_grad=True)
            ((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward()
            assert len(autograd_device_logging.status().events_raised) == 2
            pid = os.fork()
            if pid == 0:
                signal.alarm(60)
                before = autograd_device_logging.status()
                outcomes = []
                for dev in ("cpu", d0, d1):
                    x = torch.ones(3, requires_grad=True)
                    try:
                        ((x.to(dev) * 2).sum() + x.sum()).backward()
                        good = torch.equal(x.grad, torch.full((3,), 3.0))
                        outcomes.append("ran" if good else "wrong-gradient")
                    except RuntimeError as e:
                        outcomes.append("refused-by-torch" if "fork" in str(e) else repr(e))
                after = autograd_device_logging.status()
                print("CHILD_EVENTS", len(after.events_raised), flush=True)
                print("CHILD_INSPECTED", after.nodes_inspected - before.nodes_inspected, flush=True)
                print("CHILD_OUTCOMES", ",".join(outcomes), flush=True)
                os._exit(0)
            _, code = os.waitpid(pid, 0)
            print("CHILD_EXIT", code)
            """
        )
        self.assertIn("CHILD_EXIT 0", result.stdout, result.stderr)
        self.assertIn("CHILD_EVENTS 2", result.stdout)
        self.assertIn("CHILD_INSPECTED 0", result.stdout)
        outcomes = result.stdout.split("CHILD_OUTCOMES ")[1].split()[0].split(",")
        self.assertEqual(len(outcomes), 3)
        for outcome in outcomes:
            self.assertIn(outcome, ("ran", "refused-by-torch"), result.stdout)
        # One line per event for both processes together.
        self.assertEqual(sorted(result.events), sorted(EVENTS))

    def test_fork_before_any_event_each_process_logs_once(self):
        # Forked before any event fired, parent and child each log each event
        # once for their own passes. The fork comes before any backward and
        # the test accelerator is loaded after it: libtorch sizes its device
        # queues at the first backward and refuses autograd in a child forked
        # after its device threads started.
        with tempfile.TemporaryDirectory() as tmp:
            child_stderr = os.path.join(tmp, "child.stderr")
            result = run_code(
                f"""
                import autograd_device_logging, os, signal, sys
                import torch
                {IMPORT_TEST_ACCELERATOR}
                x = torch.ones(3, requires_grad=True)
                y = (x * 2).sum()

                def both_events_twice():
                    d0, d1 = autograd_test_accelerator.load()
                    for _ in range(2):
                        a = torch.ones(4, requires_grad=True)
                        ((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward()
                        assert torch.equal(a.grad, torch.full((4,), 5.0))
                    return len(autograd_device_logging.status().events_raised)

                pid = os.fork()
                if pid == 0:
                    signal.alarm(60)
                    fd = os.open({child_stderr!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                    os.dup2(fd, 2)
                    print("CHILD_EVENTS", both_events_twice(), flush=True)
                    os._exit(0)
                _, code = os.waitpid(pid, 0)
                print("CHILD_EXIT", code)
                print("PARENT_EVENTS", both_events_twice())
                """
            )
            with open(child_stderr) as f:
                child_events = autograd_events(f.read())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("CHILD_EXIT 0", result.stdout, result.stderr)
        self.assertIn("CHILD_EVENTS 2", result.stdout)
        self.assertIn("PARENT_EVENTS 2", result.stdout)
        self.assertEqual(sorted(child_events), sorted(EVENTS))
        self.assertEqual(sorted(result.events), sorted(EVENTS))


ONE_PASS_OF_EACH_CLASS = """
x = torch.ones(2, requires_grad=True)
(x * 2).sum().backward()                                   # cpu_only
a = torch.ones(2, device=d0, requires_grad=True)
(a * 2).sum().backward()                                   # single_accelerator
(x.to(d1) * 2).sum().backward()                            # accelerator_cpu
b = torch.ones(2, device=d1, requires_grad=True)
((a * 2).sum() + b.sum().to(d0)).backward()                # multi_accelerator
"""

STATS_JSON = """
import json, dataclasses
print("STATS " + json.dumps(dataclasses.asdict(autograd_device_logging.device_stats())))
"""


# What the statistics hold after ONE_PASS_OF_EACH_CLASS.
STATS_OF_ONE_PASS_OF_EACH_CLASS = {
    "enabled": True,
    "cpu_only": 1,
    "single_accelerator": 1,
    "accelerator_cpu": 1,
    "multi_accelerator": 1,
    "max_accelerators_in_one_pass": 2,
}


def stats_of(result):
    for line in result.stdout.splitlines():
        if line.startswith("STATS "):
            return json.loads(line[len("STATS ") :])
    raise AssertionError("no STATS line in: " + result.stdout + result.stderr)


class TestDeviceStats(TestCase):
    """Opt-in per-pass statistics, on real passes."""

    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)

    def test_off_by_default(self):
        result = run_code(WITH_TEST_ACCELERATOR + ONE_PASS_OF_EACH_CLASS + STATS_JSON + STATUS_JSON)
        self.assertEqual(result.returncode, 0, result.stderr)
        stats = stats_of(result)
        self.assertFalse(stats["enabled"])
        self.assertEqual(stats["cpu_only"] + stats["multi_accelerator"], 0)
        # The passes were classified; they were only not counted.
        self.assertGreater(result.status["nodes_inspected"], 0)
        self.assertEqual(len(result.status["events_raised"]), 2)

    def test_environment_variable_enables_and_every_class_is_counted(self):
        result = run_code(
            WITH_TEST_ACCELERATOR + ONE_PASS_OF_EACH_CLASS + STATS_JSON,
            env_extra={"AUTOGRAD_DEVICE_LOGGING_STATS": "1"},
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(
            stats_of(result),
            STATS_OF_ONE_PASS_OF_EACH_CLASS,
        )

    def test_api_enable_reset_and_typed_result(self):
        result = run_code(
            WITH_TEST_ACCELERATOR
            + "autograd_device_logging.enable_device_stats()\n"
            + ONE_PASS_OF_EACH_CLASS
            + textwrap.dedent(
                """
                s = autograd_device_logging.device_stats()
                assert isinstance(s, autograd_device_logging.DeviceStats)
                print("PASSES", s.passes)
                autograd_device_logging.reset_device_stats()
                print("AFTER_RESET", autograd_device_logging.device_stats().passes)
                (torch.ones(2, device=d1, requires_grad=True) * 3).sum().backward()
                """
            )
            + STATS_JSON
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("PASSES 4", result.stdout)
        self.assertIn("AFTER_RESET 0", result.stdout)
        stats = stats_of(result)
        self.assertEqual(stats["single_accelerator"], 1)
        self.assertEqual(stats["max_accelerators_in_one_pass"], 1)

    def test_summary_line_at_exit(self):
        # A normal interpreter exit (no os._exit) in a CPU-only process.
        code = "import autograd_device_logging, torch\n" + CPU_MODEL
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env=dict(
                os.environ,
                PYTHONPATH=PACKAGE_ROOT,
                AUTOGRAD_DEVICE_LOGGING_STATS="1",
                CUDA_VISIBLE_DEVICES="",
                **({"LD_PRELOAD": SANITIZER_PRELOAD} if SANITIZER_PRELOAD else {}),
            ),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(
            "autograd device stats: 1 backward passes: cpu_only=1 single_accelerator=0 "
            "accelerator_cpu=0 multi_accelerator=0 max_accelerators_in_one_pass=0",
            proc.stderr,
        )

    def test_two_ranks_gathered_on_rank_zero(self):
        worker = os.path.join(tempfile.mkdtemp(), "worker.py")
        with open(worker, "w") as f:
            f.write(
                textwrap.dedent(
                    f"""
                    import faulthandler, os, sys
                    # A hang prints every thread's stack and fails the rank,
                    # well before the test's own timeout.
                    faulthandler.dump_traceback_later(120, exit=True)
                    import torch
                    import torch.distributed as dist
                    import autograd_device_logging
                    dist.init_process_group("gloo")
                    rank = dist.get_rank()
                    autograd_device_logging.enable_device_stats()
                    if rank == 0:
                        for _ in range(3):
                            x = torch.ones(2, requires_grad=True)
                            (x * 2).sum().backward()
                    else:
                        {IMPORT_TEST_ACCELERATOR}
                        d0, d1 = autograd_test_accelerator.load()
                        x = torch.ones(2, requires_grad=True)
                        (x.to(d0) * 2).sum().backward()
                        for _ in range(2):
                            (x.to(d0).sum() + x.to(d1).sum().to(d0)).backward()
                    rows = autograd_device_logging.gather_device_stats()
                    if rank == 0:
                        print("TABLE")
                        print(autograd_device_logging.format_device_stats_table(rows))
                    dist.barrier()
                    # Before pytorch/pytorch#154976 (torch 2.8), destroying a
                    # gloo group holds the GIL while it joins gloo's threads,
                    # and one of them may still be freeing the barrier's work,
                    # which frees all_gather_object's tensors and needs the
                    # GIL: a deadlock, which the soak met on torch 2.0.1.
                    if tuple(map(int, torch.__version__.split(".")[:2])) >= (2, 8):
                        dist.destroy_process_group()
                    sys.stdout.flush(); sys.stderr.flush(); os._exit(0)
                    """
                )
            )
        result = run_child(
            [
                "-m",
                "torch.distributed.run",
                *one_node_torchrun(),
                "--nproc-per-node=2",
                "-m",
                "autograd_device_logging",
                worker,
            ]
        )
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        table = result.stdout.split("TABLE", 1)[1].strip().splitlines()
        cells = [line.split() for line in table]
        self.assertEqual(
            cells[0],
            [
                "rank",
                "passes",
                "cpu_only",
                "single_accelerator",
                "accelerator_cpu",
                "multi_accelerator",
                "max_accelerators_in_one_pass",
            ],
        )
        self.assertEqual(cells[1], ["0", "3", "3", "0", "0", "0", "0"])
        self.assertEqual(cells[2], ["1", "3", "0", "0", "1", "2", "2"])
        self.assertEqual(cells[3], ["all", "6", "3", "0", "1", "2", "2"])


CUDA_DEVICES = torch.cuda.device_count() if torch.cuda.is_available() else 0

# A forward on a side stream whose backward is slow: the engine runs each node
# on its forward stream, so x's gradient is produced on `side`, and reading it
# on the caller's stream right after backward() is only correct if the engine
# made the caller's stream wait for the leaf stream.
SIDE_STREAM = """
import torch
dev = torch.device("cuda", 0)

class SlowTriple(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        torch.cuda._sleep(300_000_000)
        return grad * 3

torch.manual_seed(0)
x = torch.randn(1 << 22, device=dev, requires_grad=True)
torch.cuda.synchronize()
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    loss = SlowTriple.apply(x * 2).sum()
loss.backward()
read_on_caller_stream = x.grad.clone()
torch.cuda.synchronize()
print("SYNCED", torch.equal(read_on_caller_stream, torch.full_like(x, 6.0)))
grads = [read_on_caller_stream.cpu()]
"""

# The split MLP on cuda:0 and the CPU, for a bitwise with/without comparison.
CUDA_CPU_MLP = """
import torch
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
dev = torch.device("cuda", 0)
lin1 = torch.nn.Linear(64, 128).to(dev)
lin2 = torch.nn.Linear(128, 8)
x = torch.randn(32, 64)
loss = lin2(torch.relu(lin1(x.to(dev))).cpu()).pow(2).mean()
loss.backward()
grads = [p.grad.cpu() for p in (*lin1.parameters(), *lin2.parameters())]
"""


class TestEitherSideOfTorch214(TestCase):
    """What a build does on either side of torch 2.14 (Note [Where torch logs
    the events itself])."""

    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)

    @unittest.skipUnless(TORCH_LOGS_EVENTS, "needs torch >= 2.14, which logs the events itself")
    def test_torch_logs_each_event_once_and_the_library_says_which_were_raised(self):
        for stats in ("0", "1"):
            result = run_code(
                WITH_TEST_ACCELERATOR + ONE_PASS_OF_EACH_CLASS + STATS_JSON + STATUS_JSON,
                env_extra={"AUTOGRAD_DEVICE_LOGGING_STATS": stats},
            )
            self.assertEqual(result.returncode, 0, result.stderr)
            # Once each: torch's; the library logs none of its own.
            self.assertEqual(sorted(result.events), sorted(EVENTS), stats)
            self.assertTrue(result.status["torch_logs_events"])
            self.assertTrue(result.status["active"])
            self.assertEqual(result.status["events_raised"], sorted(EVENTS), stats)
            if stats == "1":
                self.assertEqual(stats_of(result), STATS_OF_ONE_PASS_OF_EACH_CLASS)
        check = run_child(
            [
                "-c",
                WITH_TEST_ACCELERATOR
                + ONE_PASS_OF_EACH_CLASS
                + "print(autograd_device_logging.check_report())",
            ]
        )
        self.assertIn("events raised:", check.stdout, check.stdout + check.stderr)
        self.assertIn("logged by torch", check.stdout)

    @unittest.skipIf(TORCH_LOGS_EVENTS, "needs torch < 2.14, where the library emits the events")
    def test_below_2_14_the_library_emits_them(self):
        result = run_code(WITH_TEST_ACCELERATOR + ONE_PASS_OF_EACH_CLASS + STATUS_JSON)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(result.events), sorted(EVENTS))
        self.assertFalse(result.status["torch_logs_events"])
        self.assertEqual(result.status["events_raised"], sorted(EVENTS))


class TestOnCuda(TestCase):
    """Real CUDA passes; each case says how many GPUs it needs."""

    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def run_cuda(self, code, with_library=True, save=None):
        prologue = "import autograd_device_logging\n" if with_library else ""
        epilogue = f"torch.save(grads, {save!r})\n" if save else ""
        result = run_code(
            prologue + textwrap.dedent(code) + epilogue + (STATUS_JSON if with_library else ""),
            with_package=with_library,
            env_extra={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"},
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        if with_library:
            self.assertTrue(result.status["active"], result.stderr)
        return result

    @unittest.skipIf(CUDA_DEVICES < 1, "needs 1 CUDA device")
    def test_cuda_device_and_cpu_give_gpu_cpu_only(self):
        result = self.run_cuda(
            """
            import torch
            x = torch.ones(3, requires_grad=True)
            (x.to("cuda:0") * 2).sum().backward()
            assert torch.equal(x.grad, torch.full((3,), 2.0))
            """
        )
        self.assertEqual(result.events, ["torch.autograd.gpu_cpu_backward"])

    @unittest.skipIf(CUDA_DEVICES < 1, "needs 1 CUDA device")
    def test_cuda_one_device_alone_gives_nothing(self):
        result = self.run_cuda(
            """
            import torch
            x = torch.arange(1.0, 5.0, device="cuda:0").requires_grad_()
            (x * x).sum().backward()
            assert torch.equal(x.grad.cpu(), 2 * torch.arange(1.0, 5.0))
            """
        )
        self.assertEqual(result.events, [])
        self.assertGreater(result.status["nodes_inspected"], 0)

    @unittest.skipIf(CUDA_DEVICES < 2, "needs 2 CUDA devices")
    def test_cuda_two_devices_give_multidevice_only(self):
        result = self.run_cuda(
            """
            import torch
            a = torch.ones(4, device="cuda:0", requires_grad=True)
            b = torch.ones(4, device="cuda:1", requires_grad=True)
            ((a * 2).sum() + (b * 3).sum().to("cuda:0")).backward()
            assert torch.equal(b.grad.cpu(), torch.full((4,), 3.0))
            """
        )
        self.assertEqual(result.events, ["torch.autograd.multidevice_backward"])

    @unittest.skipIf(CUDA_DEVICES < 2, "needs 2 CUDA devices")
    def test_cuda_two_devices_and_cpu_give_both_in_one_pass(self):
        result = self.run_cuda(
            """
            import torch
            a = torch.ones(4, requires_grad=True)
            ((a.to("cuda:0") * 2).sum() + (a.to("cuda:1") * 3).sum().to("cuda:0")).backward()
            assert torch.equal(a.grad, torch.full((4,), 5.0))
            print("BOTH_AFTER_ONE_PASS", len(autograd_device_logging.status().events_raised))
            """
        )
        self.assertIn("BOTH_AFTER_ONE_PASS 2", result.stdout)
        self.assertEqual(sorted(result.events), sorted(EVENTS))

    @unittest.skipIf(CUDA_DEVICES < 1, "needs 1 CUDA device")
    def test_cuda_gradients_equal_with_and_without_the_library(self):
        stock = os.path.join(self.tmp.name, "stock.pt")
        patched = os.path.join(self.tmp.name, "patched.pt")
        self.run_cuda(CUDA_CPU_MLP, with_library=False, save=stock)
        result = self.run_cuda(CUDA_CPU_MLP, save=patched)
        for a, b in zip(torch.load(stock), torch.load(patched)):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(result.events, ["torch.autograd.gpu_cpu_backward"])

    @unittest.skipIf(CUDA_DEVICES < 1, "needs 1 CUDA device")
    def test_side_stream_leaves_keep_their_sync(self):
        stock = os.path.join(self.tmp.name, "stock.pt")
        patched = os.path.join(self.tmp.name, "patched.pt")
        without = self.run_cuda(SIDE_STREAM, with_library=False, save=stock)
        with_lib = self.run_cuda(SIDE_STREAM, save=patched)
        self.assertIn("SYNCED True", without.stdout)
        self.assertIn("SYNCED True", with_lib.stdout)
        self.assertTrue(torch.equal(torch.load(stock)[0], torch.load(patched)[0]))


if __name__ == "__main__":
    run_tests()
