# Owner(s): ["module: autograd"]
"""The per-process record as the library writes it (Note [The per-process
record], process_record.h): written at the first backward pass, when an
event is first raised and at exit, so that a process killed with SIGKILL
leaves its evidence; the job named in the documented order (Note [Which job
a process belongs to], process_record.cpp); the role; the start time; a
shared directory; temporary files of dead writers removed; every record
valid under schema/process_record.schema.json.
"""

import datetime
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from common_device_logging import (
    ACCELERATOR_LIBRARY,
    BUILD_DIR,
    DEVICE_THREADS_IDLE,
    LIBRARY,
    RECORD_ON_DISK_WITHIN_S,
    RECORD_WRITE_WAIT_LIMIT_S,
    TORCH_LOGS_EVENTS,
    WITH_TEST_ACCELERATOR,
    child_env,
    only_record,
    require_built,
    run_python,
)
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.torch_version import TorchVersion

import torch

GPU_CPU = "torch.autograd.gpu_cpu_backward"
# Preloaded, it stalls every fsync of the process by
# $ADL_TEST_STALL_FSYNC_SECONDS: slow or hung shared storage.
STALL_FSYNC_LIBRARY = os.path.join(BUILD_DIR, "test", "libadl_test_stall_fsync.so")
# Before a child that ends normally starts to exit: waits (at most 30 s)
# until every autograd device thread is back in its ready queue's wait, so
# that no device thread still holds a GraphTask when Python finalizes (Note
# [Children skip interpreter finalization] in common_device_logging.py). A
# test of what happens at exit cannot skip finalization, so it waits instead.
# A device thread waits in ReadyQueue::pop on a condition variable: a futex
# FUTEX_WAIT_BITSET without timeout, which /proc/self/task/<tid>/syscall
# shows; a thread waiting for the GIL waits with a timeout, one waiting for
# a mutex with FUTEX_WAIT, one running shows no syscall. Three readings
# 10 ms apart, each with the GIL released between them. Torch names those
# threads from 2.3 on; before, there is no name to find, and the child goes
# on at once (its exit status, which the tests check, shows the race if it
# hits). Where /proc shows no syscall (another architecture, a sandbox), the
# names alone are waited for.
# Three passes that reach the record's milestones: the first pass, then each
# event raised for the first time; prints how long they took,
# then waits for the device threads to go idle (the child may end normally).
TIMED_PASSES = (
    """
import time
a = torch.ones(4, requires_grad=True)
start = time.monotonic()
(a * 2).sum().backward()
(a.to(d0) * 2).sum().backward()
((a.to(d0)).sum() + a.to(d1).sum().to(d0)).backward()
print("PASSES", time.monotonic() - start, flush=True)
"""
    + DEVICE_THREADS_IDLE
)
# A first pass, then a pass that raises an event, each followed by a line on
# stdout and a wait for a line on stdin: the test acts in between. Then the
# wait for the device threads, before the child ends normally.
IN_PHASES = (
    """
import sys
a = torch.ones(4, requires_grad=True)
(a * 2).sum().backward()
print("FIRST", flush=True)
sys.stdin.readline()
(a.to(d0) * 2).sum().backward()
print("EVENT", flush=True)
sys.stdin.readline()
"""
    + DEVICE_THREADS_IDLE
)


class TestProcessRecord(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")

    def run_child(self, code, wait=True, **env):
        return run_python(["-c", code], self.env_of(**env), wait=wait)

    def only_record(self):
        return only_record(self, self.dir)

    def record_names(self):
        if not os.path.isdir(self.dir):
            return []
        return [n for n in os.listdir(self.dir) if n.endswith(".json")]

    def record_within_the_bound(self, written_at=None):
        """The one record, once it is on disk (and written at `written_at`),
        which must be within RECORD_ON_DISK_WITHIN_S."""
        deadline = time.monotonic() + RECORD_ON_DISK_WITHIN_S
        while True:
            if self.record_names():
                record = self.only_record()
                if written_at is None or record["written_at"] == written_at:
                    return record
            if time.monotonic() > deadline:
                self.fail(f"no record written at {written_at} within {RECORD_ON_DISK_WITHIN_S} s")
            time.sleep(0.01)

    def start_in_phases(self, **env):
        proc = subprocess.Popen(
            [sys.executable, "-c", WITH_TEST_ACCELERATOR + IN_PHASES],
            env=self.env_of(**env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.addCleanup(proc.kill)
        self.assertEqual(proc.stdout.readline().strip(), "FIRST")
        return proc

    def next_phase(self, proc, expect):
        proc.stdin.write("\n")
        proc.stdin.flush()
        self.assertEqual(proc.stdout.readline().strip(), expect)

    def finish(self, proc):
        out, err = proc.communicate("\n", timeout=300)
        self.assertEqual(proc.returncode, 0, err)
        return err

    def env_of(self, **env):
        return child_env(self.dir, **env)

    def warnings_of(self, stderr):
        return [line for line in stderr.splitlines() if "autograd_device_logging" in line]

    @unittest.skipIf(
        TorchVersion(torch.__version__) < "2.3",
        "torch names its autograd device threads from 2.3 on; before, the wait has none to find",
    )
    def test_device_threads_idle_waits_for_a_busy_device_thread(self):
        # The children's wait before a normal exit holds while a device
        # thread still runs a node: here a hook on the device that sleeps
        # 1.5 s, started from another thread.
        code = (
            WITH_TEST_ACCELERATOR
            + """
import threading, time
a = torch.ones(4, requires_grad=True)
(a.to(d0) * 2).sum().backward()
started = threading.Event()
def hook(grad):
    started.set()
    time.sleep(1.5)
    return grad
b = a.to(d0)
b.register_hook(hook)
worker = threading.Thread(target=lambda: (b * 2).sum().backward())
worker.start()
started.wait()
waiting = time.monotonic()
"""
            + DEVICE_THREADS_IDLE
            + "print('WAITED', time.monotonic() - waiting, flush=True)\nworker.join()\n"
        )
        proc = self.run_child(code)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("WAITED ")]
        self.assertEqual(len(lines), 1, proc.stdout)
        # Most of the hook's 1.5 s, far below the wait's 30 s bound.
        self.assertGreater(float(lines[0].split()[1]), 1.0, proc.stdout)
        self.assertLess(float(lines[0].split()[1]), 20.0, proc.stdout)

    def test_sigkill_after_an_event_leaves_the_event(self):
        # The process raises gpu_cpu, then is killed: no atexit handler runs.
        code = (
            WITH_TEST_ACCELERATOR
            + "a = torch.ones(4, requires_grad=True)\n"
            + "(a.to(d0) * 2).sum().backward()\n"
            + f"import os, signal, time\ntime.sleep({RECORD_ON_DISK_WITHIN_S})\n"
            + "os.kill(os.getpid(), signal.SIGKILL)\n"
        )
        proc = self.run_child(code)
        self.assertEqual(proc.returncode, -signal.SIGKILL, proc.stderr)
        record = self.only_record()
        self.assertEqual(record["events"], [GPU_CPU])
        self.assertEqual(record["written_at"], "event")
        self.assertEqual(record["events_logged_by"], "torch" if TORCH_LOGS_EVENTS else "library")
        self.assertTrue(record["ran_backward"])

    def test_first_backward_pass_is_on_disk_before_exit(self):
        # A running process's record exists from its first pass on.
        code = (
            WITH_TEST_ACCELERATOR
            + "x = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"
            + "print('PASSED', flush=True)\nimport sys\nsys.stdin.read()\n"
            + DEVICE_THREADS_IDLE
        )
        env = child_env(self.dir)
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            self.assertEqual(proc.stdout.readline().strip(), "PASSED")
            record = self.record_within_the_bound()
            self.assertEqual(record["written_at"], "first_pass")
            self.assertTrue(record["ran_backward"])
            self.assertEqual(record["events"], [])
        finally:
            proc.communicate("", timeout=300)
        self.assertEqual(proc.returncode, 0)
        record = self.only_record()  # the same file, replaced at exit
        self.assertEqual(record["written_at"], "exit")

    def test_every_sink_of_a_write_encodes_one_snapshot(self):
        # Note [Every output is a sink of one writer]: the followers (the OTLP
        # export) get the JSON of the snapshot the record was written from,
        # not a snapshot of their own.
        proc = self.run_child(
            textwrap.dedent(
                """
                import ctypes, os, sys, time
                import autograd_device_logging, torch
                lib = autograd_device_logging._activation.library()
                lib.autograd_device_logging_wait_for_record_write(0, 0)  # follows
                x = torch.ones(2, requires_grad=True)
                (x * 2).sum().backward()
                assert lib.autograd_device_logging_wait_for_record_write(0, 5000) >= 1
                time.sleep(0.5)  # a snapshot of its own would differ by now
                size = lib.autograd_device_logging_followed_record_json(None, 0, 0)
                out = ctypes.create_string_buffer(size + 1)
                lib.autograd_device_logging_followed_record_json(out, size + 1, 0)
                sys.stdout.write(out.value.decode())
                sys.stdout.flush()
                os._exit(0)  # no exit write
                """
            )
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        (name,) = self.record_names()
        with open(os.path.join(self.dir, name)) as f:
            written = f.read()
        self.assertEqual(json.loads(proc.stdout), json.loads(written))
        self.assertEqual(json.loads(written)["written_at"], "first_pass")

    def test_no_backward_pass_says_so(self):
        proc = self.run_child("import autograd_device_logging, torch\n")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        record = self.only_record()
        self.assertFalse(record["ran_backward"])
        self.assertEqual(record["written_at"], "exit")

    def job_of(self, **env):
        proc = self.run_child("import autograd_device_logging, torch\n", **env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        record = self.only_record()
        os.remove(
            os.path.join(self.dir, [n for n in os.listdir(self.dir) if n.endswith(".json")][0])
        )
        return record["job"], record["job_source"]

    def test_job_is_named_in_the_documented_order(self):
        slurm = {"SLURM_JOB_ID": "7", "SLURM_ARRAY_JOB_ID": "5", "SLURM_ARRAY_TASK_ID": "2"}
        self.assertEqual(
            self.job_of(AUTOGRAD_DEVICE_LOGGING_JOB="mine", TORCHELASTIC_RUN_ID="r1", **slurm),
            ("mine", "AUTOGRAD_DEVICE_LOGGING_JOB"),
        )
        self.assertEqual(self.job_of(TORCHELASTIC_RUN_ID="r1", **slurm), ("r1", "torchrun"))
        # torchrun's "none" (static rendezvous without --rdzv-id) names no job.
        self.assertEqual(self.job_of(TORCHELASTIC_RUN_ID="none", **slurm), ("slurm-5_2", "slurm"))
        # A run id torchrun drew at random for one node names no job; on
        # more nodes (or not a uuid) it does.
        drawn = "0f8e2a4c-5b1d-4e7a-9c3b-2d6f8a1e4b7c"
        self.assertEqual(
            self.job_of(TORCHELASTIC_RUN_ID=drawn, GROUP_WORLD_SIZE="1", **slurm),
            ("slurm-5_2", "slurm"),
        )
        self.assertEqual(
            self.job_of(TORCHELASTIC_RUN_ID=drawn, GROUP_WORLD_SIZE="1"),
            (f"-c@{socket.gethostname()}", "program"),
        )
        self.assertEqual(
            self.job_of(TORCHELASTIC_RUN_ID=drawn, GROUP_WORLD_SIZE="2"), (drawn, "torchrun")
        )
        self.assertEqual(
            self.job_of(TORCHELASTIC_RUN_ID=drawn.replace("-", "_"), GROUP_WORLD_SIZE="1"),
            (drawn.replace("-", "_"), "torchrun"),
        )
        self.assertEqual(self.job_of(SLURM_JOB_ID="7"), ("slurm-7", "slurm"))
        self.assertEqual(self.job_of(PBS_JOBID="12.pbs"), ("pbs-12.pbs", "pbs"))
        self.assertEqual(self.job_of(LSB_JOBID="9", LSB_JOBINDEX="4"), ("lsf-9_4", "lsf"))
        self.assertEqual(self.job_of(KUBERNETES_JOB_NAME="train"), ("k8s-train", "kubernetes"))
        self.assertEqual(self.job_of(), (f"-c@{socket.gethostname()}", "program"))

    def test_role_and_start_time(self):
        before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        proc = self.run_child("import autograd_device_logging, torch\n", RANK="3")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        record = self.only_record()
        self.assertEqual((record["role"], record["rank"]), ("rank", 3))
        started = datetime.datetime.strptime(record["start_time"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc
        )
        # /proc's start time is in clock ticks after a boot time in seconds.
        self.assertLessEqual(abs((started - before).total_seconds()), 2)

    def test_directory_is_created_shared_and_stale_temporaries_go(self):
        host = socket.gethostname()
        tmp = os.path.join(self.dir, ".tmp")
        os.makedirs(tmp)
        os.chmod(self.dir, 0o755)  # made by someone else: its mode stays
        dead = subprocess.Popen(["true"])
        dead.wait()
        files = {
            "dead": f"{host}-{dead.pid}-1.json.0123456789abcdef.tmp",
            "old": "other-host-1-1.json.0123456789abcdef.tmp",
            "fresh": "other-host-2-2.json.0123456789abcdef.tmp",
            "alive": f"{host}-{os.getpid()}-3.json.0123456789abcdef.tmp",
        }
        for name in files.values():
            with open(os.path.join(tmp, name), "w") as f:
                f.write("{")
        two_days_ago = time.time() - 2 * 24 * 3600
        os.utime(os.path.join(tmp, files["old"]), (two_days_ago, two_days_ago))
        proc = self.run_child("import autograd_device_logging, torch\n")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(sorted(os.listdir(tmp)), sorted([files["fresh"], files["alive"]]))
        self.assertEqual(stat.S_IMODE(os.stat(self.dir).st_mode), 0o755)
        # A directory the library creates is shared like /tmp.
        fresh_dir = os.path.join(self.tmp.name, "new", "records")
        proc = self.run_child(
            "import autograd_device_logging, torch\n",
            AUTOGRAD_DEVICE_LOGGING_REPORT_DIR=fresh_dir,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for path in (fresh_dir, os.path.join(fresh_dir, ".tmp")):
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o1777, path)

    def test_stalled_storage_never_stalls_a_backward_pass(self):
        # Every fsync of the process takes 5 s: before the writer thread, the
        # first pass of an accelerator+CPU graph took 4 fsyncs on the caller.
        stalled = self.run_child(
            WITH_TEST_ACCELERATOR + TIMED_PASSES + "import os\nos._exit(0)\n",
            LD_PRELOAD=STALL_FSYNC_LIBRARY,
            ADL_TEST_STALL_FSYNC_SECONDS="5",
        )
        self.assertEqual(stalled.returncode, 0, stalled.stderr)
        without_dir = self.run_child(
            WITH_TEST_ACCELERATOR + TIMED_PASSES + "import os\nos._exit(0)\n",
            AUTOGRAD_DEVICE_LOGGING_REPORT_DIR="",
        )
        self.assertEqual(without_dir.returncode, 0, without_dir.stderr)
        took = {}
        for name, proc in (("stalled", stalled), ("without a directory", without_dir)):
            lines = [l for l in proc.stdout.splitlines() if l.startswith("PASSES ")]
            self.assertEqual(len(lines), 1, proc.stdout)
            took[name] = float(lines[0].split()[1])
        # The passes took as long as without a report directory (1 s of
        # scheduling noise allowed on a loaded machine), far from one stall.
        self.assertLess(took["stalled"], took["without a directory"] + 1.0, took)
        self.assertLess(took["stalled"], 2.5, took)

    def test_exit_waits_for_hung_storage_at_most_the_bound(self):
        # A hung mount: every fsync takes 10 minutes. The process exits
        # within the bound, with one warning, and its status is its own.
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                WITH_TEST_ACCELERATOR + TIMED_PASSES + "print('EXITING', flush=True)\n",
            ],
            env=self.env_of(LD_PRELOAD=STALL_FSYNC_LIBRARY, ADL_TEST_STALL_FSYNC_SECONDS="600"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.addCleanup(proc.kill)
        while proc.stdout.readline().strip() != "EXITING":
            self.assertIsNone(proc.poll())
        exiting = time.monotonic()
        out, err = proc.communicate(timeout=120)
        exited = time.monotonic() - exiting
        self.assertEqual(proc.returncode, 0, err)
        # The bound, and 3 s for the interpreter's and torch's own exit.
        self.assertLess(exited, RECORD_WRITE_WAIT_LIMIT_S + 3.0, err)
        warnings = self.warnings_of(err)
        self.assertEqual(len(warnings), 1, err)
        self.assertIn("was not written within 2000 ms at exit", warnings[0])

    def test_a_planted_link_at_a_temporary_name_is_never_followed(self):
        # A second party learns the record's name from DIR and plants links
        # at the names a temporary of it could have: the old fixed name, and
        # the new ones' prefix. The next write must leave their target alone.
        victim = os.path.join(self.tmp.name, "precious")
        with open(victim, "w") as f:
            f.write("precious data")
        proc = self.start_in_phases()
        name = os.path.basename(self.record_names_within_the_bound()[0])
        tmp = os.path.join(self.dir, ".tmp")
        os.symlink(victim, os.path.join(tmp, name + ".tmp"))
        os.symlink(victim, os.path.join(tmp, name + ".0000000000000000.tmp"))
        self.next_phase(proc, "EVENT")
        record = self.record_within_the_bound(written_at="event")
        self.assertEqual(record["events"], [GPU_CPU])
        self.finish(proc)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious data")
        self.assertEqual(self.only_record()["written_at"], "exit")

    def record_names_within_the_bound(self):
        self.record_within_the_bound()
        return self.record_names()

    def test_a_link_planted_at_the_record_name_is_replaced_not_followed(self):
        victim = os.path.join(self.tmp.name, "precious")
        with open(victim, "w") as f:
            f.write("precious data")
        proc = self.start_in_phases()
        path = os.path.join(self.dir, self.record_names_within_the_bound()[0])
        os.remove(path)
        os.symlink(victim, path)
        self.next_phase(proc, "EVENT")
        self.finish(proc)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious data")
        self.assertTrue(stat.S_ISREG(os.lstat(path).st_mode))
        record = self.only_record()
        self.assertEqual((record["written_at"], record["events"]), ("exit", [GPU_CPU]))

    def assert_refused(self, proc, because, *untouched):
        self.assertEqual(proc.returncode, 0, proc.stderr)
        warnings = self.warnings_of(proc.stderr)
        self.assertEqual(len(warnings), 1, proc.stderr)
        self.assertIn(because, warnings[0])
        for path in untouched:
            self.assertEqual(os.listdir(path), [], path)

    def test_a_temporaries_directory_that_is_a_link_is_refused(self):
        elsewhere = os.path.join(self.tmp.name, "elsewhere")
        os.makedirs(elsewhere)
        os.makedirs(self.dir)
        os.symlink(elsewhere, os.path.join(self.dir, ".tmp"))
        proc = self.run_child(WITH_TEST_ACCELERATOR + TIMED_PASSES)
        self.assert_refused(proc, ".tmp is a symbolic link", elsewhere)
        self.assertEqual(self.record_names(), [])

    def test_a_record_directory_that_is_a_link_is_refused(self):
        elsewhere = os.path.join(self.tmp.name, "elsewhere")
        os.makedirs(elsewhere)
        os.symlink(elsewhere, self.dir)
        proc = self.run_child(WITH_TEST_ACCELERATOR + TIMED_PASSES)
        self.assert_refused(proc, "records is a symbolic link", elsewhere)

    def another_users_uid(self):
        if os.geteuid() != 0:
            self.skipTest("giving a file to another user needs root")
        return 65534  # nobody

    def test_another_users_temporaries_directory_without_the_sticky_bit_is_refused(self):
        uid = self.another_users_uid()
        tmp = os.path.join(self.dir, ".tmp")
        os.makedirs(tmp)
        os.chmod(tmp, 0o777)
        os.chown(tmp, uid, uid)
        proc = self.run_child(WITH_TEST_ACCELERATOR + TIMED_PASSES)
        self.assert_refused(proc, ".tmp belongs to another user", tmp)
        self.assertEqual(self.record_names(), [])
        # Sticky, like /tmp, it is shared.
        os.chmod(tmp, 0o1777)
        proc = self.run_child(WITH_TEST_ACCELERATOR + TIMED_PASSES)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.warnings_of(proc.stderr), [])
        self.assertEqual(self.only_record()["written_at"], "exit")

    def test_stale_temporaries_of_another_user_and_links_stay(self):
        uid = self.another_users_uid()
        tmp = os.path.join(self.dir, ".tmp")
        os.makedirs(tmp)
        os.chmod(tmp, 0o1777)
        dead = subprocess.Popen(["true"])
        dead.wait()
        host = socket.gethostname()
        theirs = os.path.join(tmp, f"{host}-{dead.pid}-1.json.0123456789abcdef.tmp")
        with open(theirs, "w") as f:
            f.write("{")
        os.chown(theirs, uid, uid)
        two_days_ago = time.time() - 2 * 24 * 3600
        os.utime(theirs, (two_days_ago, two_days_ago))
        victim = os.path.join(self.tmp.name, "precious")
        with open(victim, "w") as f:
            f.write("precious data")
        link = os.path.join(tmp, f"{host}-{dead.pid}-2.json.0123456789abcdef.tmp")
        os.symlink(victim, link)
        proc = self.run_child("import autograd_device_logging, torch\n")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(
            sorted(os.listdir(tmp)), sorted([os.path.basename(theirs), os.path.basename(link)])
        )
        with open(victim) as f:
            self.assertEqual(f.read(), "precious data")

    def test_a_forked_child_writes_its_own_record(self):
        # The parent's writer thread is not in the child: the child starts
        # its own, under its own pid, for the record it writes at exit (torch
        # refuses a backward pass in a child forked after one).
        code = (
            WITH_TEST_ACCELERATOR
            + "a = torch.ones(4, requires_grad=True)\n"
            + "(a.to(d0) * 2).sum().backward()\n"
            + DEVICE_THREADS_IDLE
            + "import os, sys\n"
            + "pid = os.fork()\n"
            + "if pid == 0:\n"
            + "    sys.exit(0)\n"
            + "_, status = os.waitpid(pid, 0)\n"
            + "assert status == 0, status\n"
        )
        proc = self.run_child(code)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        names = self.record_names()
        self.assertEqual(len(names), 2, (names, proc.stderr))
        pids = set()
        for name in names:
            with open(os.path.join(self.dir, name)) as f:
                record = json.load(f)
            self.assertEqual(record["written_at"], "exit")
            self.assertEqual(record["events"], [GPU_CPU])
            pids.add(record["pid"])
        self.assertEqual(len(pids), 2)
        self.assertEqual(self.warnings_of(proc.stderr), [])


if __name__ == "__main__":
    run_tests()
