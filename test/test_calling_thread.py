# Owner(s): ["module: autograd"]
"""Single-device passes on the calling thread (Note [Single-device passes on
the calling thread], calling_thread_policy.h), on the test accelerator: each
way backward is used runs in a fresh process with the opt-in and in one
without, and gives the same gradients and errors; with the opt-in, the nodes
of a single-device pass run on the thread that started it, and passes that
span several devices keep the device threads. The caller's own
multithreading setting is the same after every pass."""

import json
import tempfile
import unittest

import jsonschema
from common_device_logging import (
    ACCELERATOR_LIBRARY,
    LIBRARY,
    RECORD_SCHEMA,
    WITH_TEST_ACCELERATOR,
    only_record,
    require_built,
    run_child,
    run_code,
)
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.torch_version import TorchVersion

import torch

ON = {"AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD": "1"}

# Each scenario returns (gradients, on_caller): on_caller says whether every
# hook of the pass that it watched ran on the thread that started the pass.
SCENARIOS = """
import threading, json
from torch.utils.checkpoint import checkpoint

lib = autograd_device_logging._activation.library()

def mode():
    return bool(lib.autograd_device_logging_multithreading_enabled())

def watch(t, seen, caller=None):
    caller = caller or threading.get_ident()
    t.register_hook(lambda g: seen.append(threading.get_ident() == caller) or g)
    return t

def leaf(device=None, n=4):
    x = torch.arange(1.0, n + 1)
    return (x.to(device) if device else x).detach().requires_grad_()

def grads(*ts):
    return [None if t.grad is None else t.grad.cpu().tolist() for t in ts]

def single_device():
    a, seen = leaf(d0), []
    h = watch(a * 2, seen)
    watch(a, seen)
    (h * h).sum().backward()
    return grads(a), all(seen)

def device_and_cpu():
    a, seen = leaf(), []
    b = watch(a.to(d0), seen)
    (b * 3).sum().backward()
    return grads(a), all(seen)

def two_devices():
    a, seen = leaf(d0), []
    b = watch(a.to(d1), seen)
    (b * b).sum().backward()
    return grads(a), all(seen)

def checkpointed(reentrant):
    a, seen = leaf(d0), []
    w = leaf(d0)
    def block(x):
        return torch.sin(x * w)
    y = checkpoint(block, watch(a * 1, seen), use_reentrant=reentrant)
    y.sum().backward()
    return grads(a, w), all(seen)

def grad_with_inputs_and_create_graph():
    a, b, seen = leaf(d0), leaf(d0), []
    y = watch(a * b * b, seen).sum()
    (ga,) = torch.autograd.grad(y, inputs=[a], create_graph=True)
    (gb,) = torch.autograd.grad(ga.sum(), inputs=[b])
    return [ga.cpu().tolist(), gb.cpu().tolist()], all(seen)

def post_accumulate_hooks():
    a, seen = leaf(d0), []
    if hasattr(a, "register_post_accumulate_grad_hook"):
        caller = threading.get_ident()
        a.register_post_accumulate_grad_hook(
            lambda t: seen.append(threading.get_ident() == caller)
        )
    (a * 5).sum().backward()
    return grads(a), all(seen) if seen else None

def error_then_next_pass():
    a = leaf(d0)
    def fail(g):
        raise ValueError("raised in a backward hook")
    (a * 2).register_hook(fail)
    b = a * 2
    b.register_hook(fail)
    try:
        b.sum().backward()
        error = None
    except ValueError as e:
        error = str(e)
    got, on_caller = single_device()
    return [error, got], on_caller

def concurrent():
    results, errors = {}, []
    def one(i):
        try:
            results[i] = single_device()
        except Exception as e:
            errors.append(repr(e))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [errors, [results[i][0] for i in range(4)]], all(results[i][1] for i in range(4))

def retain_graph():
    a, seen = leaf(d0), []
    y = (watch(a * a, seen)).sum()
    y.backward(retain_graph=True)
    y.backward()
    return grads(a), all(seen)

def backward_inside_a_hook():
    a, inner, seen = leaf(d0), leaf(d0), []
    def hook(g):
        with torch.enable_grad():
            (inner * 3).sum().backward()
        return g
    b = watch(a * 2, seen)
    b.register_hook(hook)
    b.sum().backward()
    return grads(a, inner), all(seen)

def callers_own_setting_off():
    before = lib.autograd_device_logging_set_multithreading_enabled(0)
    try:
        out = two_devices()
        return out[0], [out[1], mode()]
    finally:
        lib.autograd_device_logging_set_multithreading_enabled(before)

out = {}
for name, run in [
    ("single_device", single_device),
    ("device_and_cpu", device_and_cpu),
    ("two_devices", two_devices),
    ("checkpoint_reentrant", lambda: checkpointed(True)),
    ("checkpoint_non_reentrant", lambda: checkpointed(False)),
    ("grad_with_inputs_and_create_graph", grad_with_inputs_and_create_graph),
    ("post_accumulate_hooks", post_accumulate_hooks),
    ("error_then_next_pass", error_then_next_pass),
    ("concurrent", concurrent),
    ("retain_graph", retain_graph),
    ("backward_inside_a_hook", backward_inside_a_hook),
    ("callers_own_setting_off", callers_own_setting_off),
]:
    before = mode()
    got, on_caller = run()
    out[name] = {"grads": got, "on_caller": on_caller, "mode_kept": mode() == before}
out["status"] = autograd_device_logging.status().calling_thread
print("RESULT " + json.dumps(out), flush=True)
"""

# The scenarios whose every pass spans one accelerator device and no CPU
# node: with the opt-in, they run on the calling thread.
SINGLE_DEVICE = (
    "single_device",
    "checkpoint_reentrant",
    "checkpoint_non_reentrant",
    "grad_with_inputs_and_create_graph",
    "error_then_next_pass",
    "concurrent",
    "retain_graph",
    "backward_inside_a_hook",
)


class TestCallingThread(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.results = {}
        for name, env in (("stock", {}), ("calling thread", ON)):
            result = run_code(WITH_TEST_ACCELERATOR + SCENARIOS, env_extra=env)
            lines = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")]
            cls.results[name] = (result, json.loads(lines[0][7:]) if lines else None)

    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        for name, (result, parsed) in self.results.items():
            self.assertEqual(result.returncode, 0, f"{name}: {result.stderr}")
            self.assertIsNotNone(parsed, f"{name}: {result.stdout}")
        self.stock = self.results["stock"][1]
        self.opt_in = self.results["calling thread"][1]

    def test_gradients_and_errors_are_stock_torchs(self):
        for name in self.stock:
            if name != "status":
                self.assertEqual(self.opt_in[name]["grads"], self.stock[name]["grads"], name)
        self.assertEqual(
            self.opt_in["error_then_next_pass"]["grads"][0], "raised in a backward hook"
        )
        self.assertEqual(self.opt_in["concurrent"]["grads"][0], [])

    def test_single_device_passes_run_on_the_calling_thread(self):
        for name in SINGLE_DEVICE:
            self.assertTrue(self.opt_in[name]["on_caller"], name)
            # Stock torch runs them on the device thread.
            self.assertFalse(self.stock[name]["on_caller"], name)

    @unittest.skipIf(
        TorchVersion(torch.__version__) < "2.2",
        "register_post_accumulate_grad_hook arrived in torch 2.2",
    )
    def test_post_accumulate_hooks_run_on_the_calling_thread(self):
        self.assertTrue(self.opt_in["post_accumulate_hooks"]["on_caller"])
        self.assertFalse(self.stock["post_accumulate_hooks"]["on_caller"])

    def test_passes_across_devices_keep_the_device_threads(self):
        for name in ("device_and_cpu", "two_devices"):
            self.assertFalse(self.opt_in[name]["on_caller"], name)
            self.assertFalse(self.stock[name]["on_caller"], name)

    def test_the_callers_own_setting_is_kept(self):
        for results in (self.stock, self.opt_in):
            for name, result in results.items():
                if name != "status":
                    self.assertTrue(result["mode_kept"], name)
        # The caller's own "off" runs even a two-device pass on it, as stock
        # torch does, and stays off during it.
        self.assertEqual(self.opt_in["callers_own_setting_off"]["on_caller"], [True, False])
        self.assertEqual(self.stock["callers_own_setting_off"]["on_caller"], [True, False])

    def test_status_says_so(self):
        self.assertTrue(self.opt_in["status"])
        self.assertFalse(self.stock["status"])


class TestCallingThreadSwitch(TestCase):
    """How the opt-in is turned on, and where it says so: each case a fresh
    process."""

    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY)

    def test_the_python_call_works_before_torch_is_imported(self):
        result = run_code(
            "import autograd_device_logging as adl\n"
            "adl.set_calling_thread_backward(True)\n"
            "import torch\n"
            "print('ON', adl.status().calling_thread)\n"
            "adl.set_calling_thread_backward(False)\n"
            "print('OFF', adl.status().calling_thread)\n"
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ON True", result.stdout)
        self.assertIn("OFF False", result.stdout)

    def test_check_and_the_record_say_so(self):
        result = run_child(["-m", "autograd_device_logging", "--check"], env_extra=ON)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertRegex(result.stdout, r"(?m)^calling thread: +on: ")
        with tempfile.TemporaryDirectory() as directory:
            result = run_code(
                "import autograd_device_logging, torch\n"
                "assert autograd_device_logging.write_process_record()\n",
                env_extra=dict(ON, AUTOGRAD_DEVICE_LOGGING_REPORT_DIR=directory),
            )
            self.assertEqual(result.returncode, 0, result.stderr)
            record = only_record(self, directory)
        jsonschema.validate(record, RECORD_SCHEMA)
        self.assertIs(record["calling_thread"], True)


if __name__ == "__main__":
    run_tests()
