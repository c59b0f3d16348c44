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
import time

from torch.testing._internal.common_utils import TestCase, run_tests

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TEST_DIR)

from test_autograd_device_logging import (  # noqa: E402
    ACCELERATOR_LIBRARY,
    LIBRARY,
    TORCH_LOGS_EVENTS,
    WITH_TEST_ACCELERATOR,
    require_built,
)
from test_fleet_report import child_env, only_record  # noqa: E402

GPU_CPU = "torch.autograd.gpu_cpu_backward"
# Scheduler variables a test machine may itself have set.
SCHEDULER_VARIABLES = (
    "AUTOGRAD_DEVICE_LOGGING_JOB",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "PBS_JOBID",
    "LSB_JOBID",
    "LSB_JOBINDEX",
    "KUBERNETES_JOB_NAME",
    "RANK",
)


class TestProcessRecord(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")

    def run_child(self, code, wait=True, **env):
        base = child_env(self.dir)
        for name in SCHEDULER_VARIABLES:
            base.pop(name, None)
        base.update(env)
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=base,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if wait:
            out, err = proc.communicate(timeout=300)
            proc.stdout_text, proc.stderr_text = out, err
        return proc

    def only_record(self):
        return only_record(self, self.dir)

    def test_sigkill_after_an_event_leaves_the_event(self):
        # The process raises gpu_cpu, then is killed: no atexit handler runs.
        code = (
            WITH_TEST_ACCELERATOR
            + "a = torch.ones(4, requires_grad=True)\n"
            + "(a.to(d0) * 2).sum().backward()\n"
            + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
        )
        proc = self.run_child(code)
        self.assertEqual(proc.returncode, -signal.SIGKILL, proc.stderr_text)
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
            record = self.only_record()
            self.assertEqual(record["written_at"], "first_pass")
            self.assertTrue(record["ran_backward"])
            self.assertEqual(record["events"], [])
        finally:
            proc.communicate("", timeout=300)
        self.assertEqual(proc.returncode, 0)
        record = self.only_record()  # the same file, replaced at exit
        self.assertEqual(record["written_at"], "exit")

    def test_no_backward_pass_says_so(self):
        proc = self.run_child("import autograd_device_logging, torch\n")
        self.assertEqual(proc.returncode, 0, proc.stderr_text)
        record = self.only_record()
        self.assertFalse(record["ran_backward"])
        self.assertEqual(record["written_at"], "exit")

    def job_of(self, **env):
        proc = self.run_child("import autograd_device_logging, torch\n", **env)
        self.assertEqual(proc.returncode, 0, proc.stderr_text)
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
        self.assertEqual(self.job_of(SLURM_JOB_ID="7"), ("slurm-7", "slurm"))
        self.assertEqual(self.job_of(PBS_JOBID="12.pbs"), ("pbs-12.pbs", "pbs"))
        self.assertEqual(self.job_of(LSB_JOBID="9", LSB_JOBINDEX="4"), ("lsf-9_4", "lsf"))
        self.assertEqual(self.job_of(KUBERNETES_JOB_NAME="train"), ("k8s-train", "kubernetes"))
        self.assertEqual(self.job_of(), (f"-c@{socket.gethostname()}", "program"))

    def test_role_and_start_time(self):
        before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        proc = self.run_child("import autograd_device_logging, torch\n", RANK="3")
        self.assertEqual(proc.returncode, 0, proc.stderr_text)
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
            "dead": f"{host}-{dead.pid}-1.json.tmp",
            "old": "other-host-1-1.json.tmp",
            "fresh": "other-host-2-2.json.tmp",
            "alive": f"{host}-{os.getpid()}-3.json.tmp",
        }
        for name in files.values():
            with open(os.path.join(tmp, name), "w") as f:
                f.write("{")
        two_days_ago = time.time() - 2 * 24 * 3600
        os.utime(os.path.join(tmp, files["old"]), (two_days_ago, two_days_ago))
        proc = self.run_child("import autograd_device_logging, torch\n")
        self.assertEqual(proc.returncode, 0, proc.stderr_text)
        self.assertEqual(sorted(os.listdir(tmp)), sorted([files["fresh"], files["alive"]]))
        self.assertEqual(stat.S_IMODE(os.stat(self.dir).st_mode), 0o755)
        # A directory the library creates is shared like /tmp.
        fresh_dir = os.path.join(self.tmp.name, "new", "records")
        proc = self.run_child(
            "import autograd_device_logging, torch\n",
            AUTOGRAD_DEVICE_LOGGING_REPORT_DIR=fresh_dir,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr_text)
        for path in (fresh_dir, os.path.join(fresh_dir, ".tmp")):
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o1777, path)


if __name__ == "__main__":
    run_tests()
