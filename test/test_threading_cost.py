# Owner(s): ["module: autograd"]
"""The threading-cost measurement (Note [Measuring the cost of single-threaded
backward], threading_measurement.py): pairs of sampled passes, one with
multithreading off and one on, on the two-device test accelerator. Each case
runs in a child process, since the measurement wraps torch.autograd for the
whole process.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

from common_device_logging import (
    ACCELERATOR_LIBRARY,
    EXIT_NOW,
    LIBRARY,
    RECORD_ON_DISK_WITHIN_S,
    WITH_TEST_ACCELERATOR,
    child_env,
    one_node_torchrun,
    only_record,
    report_modules,
    require_built,
    run_python,
)
from torch.testing._internal.common_utils import TestCase, run_tests

import torch

MEASURE = "AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING"
# Every pass after the warm-up is sampled, in pairs.
EVERY_PASS = {
    MEASURE: "1",
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE": "1",
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_WARMUP": "0",
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_SEED": "7",
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_WASHOUT": "0",
}
# Prints what the measurement found, as JSON, on the child's last line.
PRINT_COST = """
import dataclasses, json as _json
_cost = autograd_device_logging.threading_cost()
print("COST", _json.dumps(None if _cost is None else dataclasses.asdict(_cost)))
"""
# How a child ends: the cost, the record written and waited for, then
# os._exit (Note [Children skip interpreter finalization]: with a Python hook
# or a pass on a device thread just before a normal exit, stock PyTorch can
# abort in finalization, which the soak caught here once in three rounds).
FINISH = PRINT_COST + "autograd_device_logging.write_process_record()\n" + EXIT_NOW
# A leaf on testaccel:0 and the pass's shapes: single_accelerator passes.
ON_ONE_DEVICE = """
w = torch.ones(4, 4).to(d0).requires_grad_()
def one_pass():
    (w * 2).sum().backward()
"""


def where_each_pass_ran(passes):
    """Child code: `passes` passes of ON_ONE_DEVICE's graph, then a line
    "WHERE [...]": for each, whether its testaccel node ran on the calling
    thread (a hook on a testaccel tensor runs where that device's node runs)."""
    return f"""
import threading
caller = threading.get_ident()
where = []
for i in range({passes}):
    y = w * 2
    y.register_hook(lambda g: where.append(threading.get_ident() == caller))
    y.sum().backward()
print("WHERE", where)
"""


def cpu_list(cpus):
    """CPUs as Linux lists them ("0-3,8"): the test's own writer of the
    record's format."""
    runs = []
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpus_of(text):
    out = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def where_from(stdout):
    line = next(l for l in stdout.splitlines() if l.startswith("WHERE"))
    return json.loads(line[6:].replace("True", "true").replace("False", "false"))


class ThreadingCostTestCase(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")

    def run_child(self, code, expect_success=True, **env):
        base = child_env(self.dir)
        for name in list(base):
            if name.startswith("AUTOGRAD_DEVICE_LOGGING_MEASURE"):
                del base[name]
        base.update(env)
        proc = run_python(["-c", WITH_TEST_ACCELERATOR + textwrap.dedent(code) + FINISH], base)
        if expect_success:
            self.assertEqual(proc.returncode, 0, proc.stderr)
        proc.cost = None
        for line in proc.stdout.splitlines():
            if line.startswith("COST "):
                proc.cost = json.loads(line[5:])
        return proc

    def only_record(self):
        return only_record(self, self.dir)


class TestSampledPasses(ThreadingCostTestCase):
    def test_off_runs_on_the_calling_thread_and_on_on_the_device_thread(self):
        # A hook on a testaccel tensor runs where that device's node runs.
        proc = self.run_child(
            ON_ONE_DEVICE + where_each_pass_ran(8),
            **EVERY_PASS,
        )
        on_caller = where_from(proc.stdout)
        self.assertEqual(len(on_caller), 8)
        # Each pair: one pass on the calling thread (off), one not (on).
        for i in range(0, 8, 2):
            self.assertEqual(sorted(on_caller[i : i + 2]), [False, True], on_caller)
        self.assertEqual(proc.cost["classes"]["single_accelerator"]["pairs"], 4)

    def test_the_record_says_where_the_threads_ran(self):
        # Free: each thread's affinity is the process's; pinned to one CPU
        # (before the device thread starts, which inherits it): that CPU,
        # and each thread was seen there. Device threads are named
        # pt_autograd_<device> (Note [Where the measured threads ran]).
        allowed = sorted(os.sched_getaffinity(0))
        for pinned in (None, allowed[-1]):
            with self.subTest(pinned=pinned):
                shutil.rmtree(self.dir, ignore_errors=True)
                pin = "" if pinned is None else f"os.sched_setaffinity(0, {{{pinned}}})\n"
                proc = self.run_child(
                    "import os\n"
                    + pin
                    + ON_ONE_DEVICE
                    + "for i in range(6):\n    one_pass()\n"
                    + 'print("THREADS", torch.get_num_threads())\n',
                    **EVERY_PASS,
                )
                record = self.only_record()
                placement = record["threading_cost"]["placement"]
                threads = placement["threads"]
                # The test accelerator's two devices each have a thread,
                # which torch names from 2.3 on; before, only the calling
                # thread can be told apart.
                named = torch.torch_version.TorchVersion(torch.__version__) >= "2.3"
                devices = ["pt_autograd_0", "pt_autograd_1"] if named else []
                self.assertEqual(sorted(threads), ["calling", *devices], placement)
                expected = cpu_list(allowed if pinned is None else [pinned])
                for name, thread in threads.items():
                    self.assertEqual(thread["affinity"], expected, name)
                    seen = cpus_of(thread["ran_on"])
                    self.assertTrue(seen, name)
                    self.assertLessEqual(seen, set(cpus_of(expected)), name)
                threads_line = next(l for l in proc.stdout.splitlines() if l.startswith("THREADS"))
                self.assertEqual(placement["intra_op_threads"], int(threads_line.split()[1]))
                quota = placement["cpu_quota"]
                self.assertTrue(quota is None or quota > 0, quota)
                key = report_modules().record_fields.placement_key(
                    [t["affinity"] for t in threads.values()], quota
                )
                if pinned is not None:
                    self.assertTrue(key.startswith("1 CPU"), key)

    def test_a_washout_pass_runs_in_the_mode_of_the_timed_pass_after_it(self):
        proc = self.run_child(
            ON_ONE_DEVICE + where_each_pass_ran(12),
            **dict(EVERY_PASS, AUTOGRAD_DEVICE_LOGGING_MEASURE_WASHOUT="2"),
        )
        on_caller = where_from(proc.stdout)
        # Each pair: three passes in one mode (two untimed, then the timed
        # one), then three in the other.
        for i in range(0, 12, 6):
            first, second = on_caller[i : i + 3], on_caller[i + 3 : i + 6]
            self.assertEqual(len(set(first)), 1, on_caller)
            self.assertEqual(second, [not first[0]] * 3, on_caller)
        self.assertEqual(proc.cost["classes"]["single_accelerator"]["pairs"], 2)

    def test_processes_of_one_job_sample_the_same_passes(self):
        # The seed is the job's name as the record gives it.
        runs = [
            where_from(
                self.run_child(
                    ON_ONE_DEVICE + where_each_pass_ran(24),
                    **dict(
                        EVERY_PASS,
                        AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE="0.5",
                        AUTOGRAD_DEVICE_LOGGING_MEASURE_SEED="",
                        AUTOGRAD_DEVICE_LOGGING_MEASURE_PAIRS="100",
                        AUTOGRAD_DEVICE_LOGGING_JOB="one-job",
                    ),
                ).stdout
            )
            for _ in range(2)
        ]
        self.assertIn(True, runs[0])
        self.assertEqual(runs[0], runs[1])

    def test_nothing_is_sampled_when_the_rate_is_zero_or_in_the_warm_up(self):
        code = ON_ONE_DEVICE + where_each_pass_ran(12)
        proc = self.run_child(code, **dict(EVERY_PASS, AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE="0"))
        self.assertEqual(where_from(proc.stdout), [False] * 12)
        self.assertEqual(proc.cost["classes"], {})
        proc = self.run_child(
            code,
            **dict(
                EVERY_PASS,
                AUTOGRAD_DEVICE_LOGGING_MEASURE_WARMUP="5",
                AUTOGRAD_DEVICE_LOGGING_MEASURE_PAIRS="2",
            ),
        )
        on_caller = [i for i, c in enumerate(where_from(proc.stdout)) if c]
        # Two pairs after five warm-up passes: passes 5..8, one off per pair.
        self.assertEqual(len(on_caller), 2, on_caller)
        self.assertTrue(all(5 <= i < 9 for i in on_caller), on_caller)
        self.assertEqual(proc.cost["classes"]["single_accelerator"]["pairs"], 2)

    def test_each_pass_is_attributed_to_its_class(self):
        proc = self.run_child(
            """
leaf = torch.ones(4, 4, requires_grad=True)
on_d0 = torch.ones(4, 4).to(d0).requires_grad_()
graphs = {
    "single_accelerator": lambda: (on_d0 * 2).sum(),
    "accelerator_cpu": lambda: (leaf.to(d0) * 2).sum(),
    "multi_accelerator": lambda: (on_d0.to(d1) * 2).sum(),
    "cpu_only": lambda: (leaf * 2).sum(),
}
for name, graph in graphs.items():
    for i in range(4):
        graph().backward()
""",
            **dict(EVERY_PASS, AUTOGRAD_DEVICE_LOGGING_MEASURE_PAIRS="100"),
        )
        pairs = {c: v["pairs"] for c, v in proc.cost["classes"].items()}
        self.assertEqual(
            pairs,
            {"single_accelerator": 2, "accelerator_cpu": 2, "multi_accelerator": 2, "cpu_only": 2},
        )
        self.assertEqual(proc.cost["discarded"], {})

    def test_a_pair_of_two_graphs_is_discarded(self):
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
for i in range(6):
    ((w * 2).sum() if i % 2 else (w * 2 + 1).exp().sum()).backward()
""",
            **EVERY_PASS,
        )
        self.assertEqual(proc.cost["classes"], {})
        self.assertEqual(proc.cost["discarded"], {"graph changed": 3})

    def test_gradients_are_bit_identical_in_both_modes(self):
        # The split MLP over testaccel:0, testaccel:1 and the CPU; every
        # pass sampled, half of them single-threaded.
        proc = self.run_child(
            """
torch.manual_seed(0)
params = [torch.randn(8, 16), torch.randn(16), torch.randn(16, 16), torch.randn(16, 4)]
params = [p.requires_grad_() for p in params]
x = torch.randn(5, 8)
def grads():
    for p in params:
        p.grad = None
    w1, b1, w2, w3 = params
    h = torch.tanh(x.to(d0) @ w1.to(d0) + b1.to(d0))
    h = torch.relu(h.to(d1) @ w2.to(d1))
    (h.to("cpu") @ w3).pow(2).mean().backward()
    return [p.grad.clone() for p in params]
reference = grads()
same = [all(torch.equal(a, b) for a, b in zip(grads(), reference)) for i in range(10)]
print("SAME", all(same), len(same))
""",
            **dict(EVERY_PASS, AUTOGRAD_DEVICE_LOGGING_MEASURE_WARMUP="1"),
        )
        self.assertIn("SAME True 10", proc.stdout)
        self.assertEqual(proc.cost["classes"]["multi_accelerator"]["pairs"], 5)


class TestNeverSampled(ThreadingCostTestCase):
    def test_an_exception_propagates_and_the_mode_is_restored(self):
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
import threading
caller = threading.get_ident()
class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1
    @staticmethod
    def backward(ctx, g):
        where.append(threading.get_ident() == caller)
        raise ValueError("boom in backward")
lib = autograd_device_logging._activation.library()
where = []
for i in range(8):
    try:
        Boom.apply(w).sum().backward()
    except ValueError as e:
        print("CAUGHT", type(e).__name__, str(e).splitlines()[0])
    print("MODE", lib.autograd_device_logging_multithreading_enabled())
print("OFF_PASSES", sum(where))
""",
            **EVERY_PASS,
        )
        self.assertEqual(proc.stdout.count("CAUGHT ValueError boom in backward"), 8, proc.stdout)
        self.assertEqual(proc.stdout.count("MODE 1"), 8, proc.stdout)
        # Some of the failing passes ran single-threaded (seed 7 picks off
        # first in some pairs), and the mode came back after each.
        self.assertNotIn("OFF_PASSES 0", proc.stdout)
        self.assertEqual(proc.cost["discarded"], {"exception in the pass": 8})

    def test_a_caller_with_multithreading_off_is_left_alone(self):
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
lib = autograd_device_logging._activation.library()
with torch.autograd.set_multithreading_enabled(False):
    for i in range(4):
        one_pass()
        print("MODE", lib.autograd_device_logging_multithreading_enabled())
""",
            **EVERY_PASS,
        )
        self.assertEqual(proc.stdout.count("MODE 0"), 4, proc.stdout)
        self.assertEqual(proc.cost["classes"], {})
        self.assertEqual(proc.cost["not_sampled"], {"multithreading already off": 4})

    def test_reentrant_checkpoint_stops_the_measurement(self):
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
from torch.utils.checkpoint import checkpoint
for i in range(4):
    checkpoint(lambda t: (t * 2).exp(), w, use_reentrant=True).sum().backward()
for i in range(4):
    one_pass()
""",
            **EVERY_PASS,
        )
        self.assertEqual(proc.cost["classes"], {})
        self.assertEqual(proc.cost["discarded"], {"another backward ran during it": 1})
        self.assertEqual(proc.cost["not_sampled"], {"inside or beside another backward": 1})

    def test_backward_inside_a_hook_is_not_sampled(self):
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
other = torch.ones(3, requires_grad=True)
def hook(g):
    with torch.enable_grad():
        torch.autograd.grad((other * 3).sum(), other)
    return g
for i in range(2):
    y = w * 2
    y.register_hook(hook)
    y.sum().backward()
""",
            **dict(EVERY_PASS, AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE="1"),
        )
        self.assertEqual(proc.cost["not_sampled"], {"inside or beside another backward": 1})
        self.assertEqual(proc.cost["discarded"], {"another backward ran during it": 1})

    def test_another_threads_concurrent_pass_is_not_sampled(self):
        # A sampled pass whose node starts another thread's backward and
        # waits for it to end: that pass runs beside the sampled one, so it is
        # never part of a pair, and the sampled pass is discarded.
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
import threading
other = torch.ones(3, requires_grad=True)
beside_done = threading.Event()
def beside():
    (other * 3).sum().backward()
    beside_done.set()
class StartsAnotherBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1
    @staticmethod
    def backward(ctx, g):
        threading.Thread(target=beside).start()
        assert beside_done.wait(60), "the other thread's backward did not end"
        return g
StartsAnotherBackward.apply(w).sum().backward()
assert torch.equal(other.grad, torch.full((3,), 3.0))
for i in range(2):
    one_pass()
""",
            **EVERY_PASS,
        )
        self.assertEqual(proc.cost["not_sampled"], {"inside or beside another backward": 1})
        self.assertEqual(proc.cost["discarded"], {"another backward ran during it": 1})
        self.assertEqual(proc.cost["classes"], {})

    @unittest.skipIf(
        torch.torch_version.TorchVersion(torch.__version__) < "2.4",
        "needs torch._dynamo.compiled_autograd (torch 2.4+)",
    )
    def test_compiled_autograd_is_not_sampled(self):
        # What compiled autograd's enable() sets while it is on.
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
import torch._dynamo.compiled_autograd as ca
ca.compiled_autograd_enabled = True
for i in range(2):
    one_pass()
ca.compiled_autograd_enabled = False
""",
            **EVERY_PASS,
        )
        self.assertEqual(proc.cost["not_sampled"], {"compiled autograd": 2})
        self.assertEqual(proc.cost["classes"], {})

    def test_off_wraps_nothing(self):
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
import torch.autograd
one_pass()
print("WRAPPED", hasattr(torch.autograd.backward, "_autograd_device_logging_wrapped"),
      hasattr(torch.autograd.grad, "_autograd_device_logging_wrapped"))
print("STATUS", autograd_device_logging.status().threading_cost)
"""
        )
        self.assertIn("WRAPPED False False", proc.stdout)
        self.assertIn("STATUS None", proc.stdout)
        self.assertIsNone(proc.cost)
        self.assertIsNone(self.only_record()["threading_cost"])


class TestResults(ThreadingCostTestCase):
    def test_the_record_keeps_the_pairs_through_sigkill(self):
        proc = self.run_child(
            ON_ONE_DEVICE
            + f"""
import os, signal, time
for i in range(6):
    one_pass()
time.sleep({RECORD_ON_DISK_WITHIN_S})  # the pairs reach the disk within it
os.kill(os.getpid(), signal.SIGKILL)
""",
            expect_success=False,
            **EVERY_PASS,
        )
        self.assertEqual(proc.returncode, -signal.SIGKILL, proc.stderr)
        record = self.only_record()
        self.assertEqual(record["schema"], "2.3")
        cost = record["threading_cost"]
        self.assertEqual(len(cost["pairs"]["single_accelerator"]), 3)
        self.assertEqual(record["written_at"], "measurement")
        for off, on in cost["pairs"]["single_accelerator"]:
            self.assertGreater(off, 0)
            self.assertGreater(on, 0)

    def test_status_and_record_agree(self):
        proc = self.run_child(
            ON_ONE_DEVICE
            + """
for i in range(10):
    one_pass()
""",
            **EVERY_PASS,
        )
        record = self.only_record()
        pairs = record["threading_cost"]["pairs"]["single_accelerator"]
        self.assertEqual(record["written_at"], "explicit")
        self.assertEqual(len(pairs), 5)
        status = proc.cost["classes"]["single_accelerator"]
        percent = sorted(100.0 * (a - b) / b for a, b in pairs)
        self.assertAlmostEqual(status["median_difference_percent"], percent[2])
        self.assertEqual(status["pairs"], 5)
        self.assertEqual(status["quartiles_percent"], [percent[1], percent[3]])

    def test_the_library_writes_what_the_measurement_hands_it(self):
        # One writer: the measurement hands over its settings, each pair and
        # its counts through typed calls, and the library writes the record's
        # threading_cost; what the schema would refuse is refused there.
        proc = self.run_child(
            """
lib = autograd_device_logging._activation.library()
pair, count = lib.autograd_device_logging_record_measured_pair, lib.autograd_device_logging_record_measurement_count
print("BEFORE_START", pair(1, 10, 20), count(0, b"x", 1))
lib.autograd_device_logging_start_recording_threading_cost(0.5, 3, 8, 1, 0, 4)
print("REFUSED", pair(4, 10, 20), pair(-1, 10, 20), pair(1, 0, 20), pair(1, 10, 0), pair(1, 10, 2**63), count(2, b"x", 1))
print("KEPT", pair(1, 10, 20), pair(1, 30, 40), pair(3, 5, 6), count(0, b"inside", 2), count(1, b"graph changed", 1), count(1, b"graph changed", 3))
""",
        )
        self.assertIn("BEFORE_START -1 -1", proc.stdout)
        self.assertIn("REFUSED -1 -1 -1 -1 -1 -1", proc.stdout)
        self.assertIn("KEPT 1 1 1 0 0 0", proc.stdout)
        cost = self.only_record()["threading_cost"]
        # No calling thread named, and no device thread ran.
        placement = cost.pop("placement")
        self.assertEqual(placement["threads"], {})
        self.assertEqual(placement["intra_op_threads"], 4)
        self.assertEqual(
            cost,
            {
                "pairs": {
                    "single_accelerator": [[10, 20], [30, 40]],
                    "multi_accelerator": [[5, 6]],
                },
                "not_sampled": {"inside": 2},
                "discarded": {"graph changed": 3},
                "rate": 0.5,
                "warmup": 3,
                "max_pairs": 8,
                "washout": 1,
            },
        )

    def test_counts_after_the_last_pair_reach_the_record_at_exit(self):
        # A normal exit (CPU passes only: no device thread is left to race
        # interpreter finalization): a pair, then a pair of two graphs, which
        # is discarded after the last measured pair.
        code = (
            "import autograd_device_logging, torch\n"
            "x = torch.ones(3, requires_grad=True)\n"
            "for i in range(2):\n"
            "    (x * 2).sum().backward()\n"
            "for i in range(2):\n"
            "    ((x * 2).exp() if i else x * 2).sum().backward()\n"
        )
        env = child_env(self.dir)
        env.update(EVERY_PASS)
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        record = self.only_record()
        self.assertEqual(record["written_at"], "exit")
        self.assertEqual(len(record["threading_cost"]["pairs"]["cpu_only"]), 1)
        self.assertEqual(record["threading_cost"]["discarded"], {"graph changed": 1})

    def test_the_launcher_option_measures(self):
        script = os.path.join(self.tmp.name, "train.py")
        with open(script, "w") as f:
            f.write(
                WITH_TEST_ACCELERATOR
                + ON_ONE_DEVICE
                + "for i in range(4):\n    one_pass()\n"
                + "print(autograd_device_logging.status().threading_cost.classes)\n"
                # Note [Children skip interpreter finalization]: the test
                # accelerator's device thread can abort a normal exit.
                + "autograd_device_logging.write_process_record()\n"
                + EXIT_NOW
            )
        env = child_env(self.dir, **{k: v for k, v in EVERY_PASS.items() if k != MEASURE})
        env.pop(MEASURE, None)
        proc = subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "--measure-threading", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("single_accelerator", proc.stdout)
        self.assertEqual(
            len(self.only_record()["threading_cost"]["pairs"]["single_accelerator"]), 2
        )

    def test_bad_settings_are_one_warning_each_and_the_default(self):
        proc = self.run_child(
            ON_ONE_DEVICE + "one_pass()\n",
            **dict(
                EVERY_PASS,
                AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE="2",
                AUTOGRAD_DEVICE_LOGGING_MEASURE_PAIRS="many",
            ),
        )
        self.assertIn(
            "ignoring AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE=2: use a number from 0 to 1; "
            "using the default, 0.02.",
            proc.stderr,
        )
        self.assertIn(
            "ignoring AUTOGRAD_DEVICE_LOGGING_MEASURE_PAIRS=many: use a whole number from 0 to "
            "10000; using the default, 64.",
            proc.stderr,
        )
        self.assertEqual(proc.cost["settings"]["rate"], 0.02)
        self.assertEqual(proc.cost["settings"]["max_pairs"], 64)


class TestDistributed(ThreadingCostTestCase):
    @unittest.skipIf(not torch.distributed.is_available(), "needs torch.distributed")
    def test_ddp_on_gloo_with_measurement(self):
        script = os.path.join(self.tmp.name, "ddp.py")
        with open(script, "w") as f:
            f.write(
                textwrap.dedent(
                    """
                    import sys
                    import autograd_device_logging, torch, torch.distributed as dist
                    dist.init_process_group("gloo")
                    torch.manual_seed(0)
                    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
                    torch.manual_seed(1 + dist.get_rank())
                    lib = autograd_device_logging._activation.library()
                    modes = []
                    for step in range(24):
                        out = model(torch.randn(16, 8))
                        out.register_hook(
                            lambda g: modes.append(lib.autograd_device_logging_multithreading_enabled())
                        )
                        out.pow(2).mean().backward()
                    grads = [p.grad.clone() for p in model.parameters()]
                    gathered = [None, None]
                    dist.all_gather_object(gathered, grads)
                    same = all(torch.equal(a, b) for a, b in zip(*gathered))
                    cost = autograd_device_logging.threading_cost()
                    with open(sys.argv[1] + str(dist.get_rank()), "w") as f:
                        print("SAME", same, "PAIRS",
                              {c: v.pairs for c, v in cost.classes.items()}, "MODES", modes, file=f)
                    dist.destroy_process_group()
                    # Note [Children skip interpreter finalization]: a rank
                    # that ended normally aborted at exit under load.
                    import os
                    sys.stdout.flush(); sys.stderr.flush()
                    os._exit(0)
                    """
                )
            )
        env = child_env(
            self.dir,
            AUTOGRAD_DEVICE_LOGGING_JOB="ddp-test",
            **dict(
                EVERY_PASS,
                AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE="0.5",
                AUTOGRAD_DEVICE_LOGGING_MEASURE_SEED="",
            ),
        )
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                *one_node_torchrun(),
                "--nproc-per-node",
                "2",
                script,
                os.path.join(self.tmp.name, "rank"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        lines = []
        for rank in (0, 1):
            with open(os.path.join(self.tmp.name, f"rank{rank}")) as f:
                lines.append(f.read())
        for line in lines:
            self.assertIn("SAME True", line)
        # One seed per job: both ranks ran the same passes single-threaded.
        self.assertEqual(lines[0].split("PAIRS")[1], lines[1].split("PAIRS")[1])
        self.assertIn("0", lines[0].split("MODES")[1])
        self.assertIn("'cpu_only'", lines[0])


if __name__ == "__main__":
    run_tests()
