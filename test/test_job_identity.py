# Owner(s): ["module: autograd"]
"""Every record in the right job (Note [A process's identity is decided once,
at start-up], process_identity.h): one program gives one job however its
process ends, however it was started, and in the children it starts. Each
case is a fresh process that writes a record into its own directory."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import jsonschema
from common_device_logging import (
    LIBRARY,
    RECORD_ON_DISK_WITHIN_S,
    RECORD_SCHEMA,
    child_env,
    one_node_torchrun,
    program_job,
    report_modules,
    require_built,
)
from torch.testing._internal.common_utils import TestCase, run_tests

# A CPU-only training step, then the way the process ends (argv[1]). A CPU
# pass uses no device thread, so a normal exit meets no autograd thread.
TRAIN = """
import autograd_device_logging
import os, signal, sys, time
import torch

x = torch.ones(3, requires_grad=True)
(x * 2).sum().backward()
how = sys.argv[1]
if how in ("sigterm", "sigkill"):
    time.sleep({wait})  # the first pass's record is on disk by then
    os.kill(os.getpid(), signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    time.sleep(60)
elif how == "exit3":
    sys.exit(3)
elif how == "raise":
    raise ValueError("the training step failed")
elif how == "os_exit":
    time.sleep({wait})
    os._exit(0)
"""
# How each ending shows in the exit status.
STATUS = {
    "normal": 0,
    "exit3": 3,
    "raise": 1,
    "sigterm": -signal.SIGTERM,
    "sigkill": -signal.SIGKILL,
    "os_exit": 0,
}
# A spawn child runs a pass of its own: it starts as `python -c`, and
# multiprocessing runs the parent's script in it as __mp_main__.
SPAWNS = """
import autograd_device_logging
import multiprocessing
import torch

def step():
    y = torch.ones(2, requires_grad=True)
    (y * 3).sum().backward()

if __name__ == "__main__":
    step()
    child = multiprocessing.get_context("spawn").Process(target=step)
    child.start()
    child.join()
    assert child.exitcode == 0
"""
HOST = socket.gethostname()


class TestJobIdentity(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.script = self.write("train.py", TRAIN.format(wait=2 * RECORD_ON_DISK_WITHIN_S))

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        return path

    def records_of(self, args, expect_status=0, cwd=None, **env):
        """The records a fresh `python ARGS` leaves in a directory of its own."""
        directory = tempfile.mkdtemp(dir=self.tmp.name)
        proc = subprocess.run(
            [sys.executable, *args],
            env=child_env(directory, **env),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, expect_status, proc.stderr)
        records = []
        for name in sorted(os.listdir(directory)):
            if name.endswith(".json"):
                with open(os.path.join(directory, name)) as f:
                    records.append(json.load(f))
        for record in records:
            jsonschema.validate(record, RECORD_SCHEMA)
        return records

    def identity(self, record):
        return record["program"], record["job"], record["job_source"]

    def test_one_script_is_one_job_however_it_ends(self):
        expected = (self.script, program_job(self.script, HOST), "program")
        for how, status in STATUS.items():
            (record,) = self.records_of([self.script, how], status)
            self.assertEqual(self.identity(record), expected, how)
            self.assertTrue(record["ran_backward"], how)
            # Exits that run atexit write there; the others leave the first
            # pass's record.
            self.assertEqual(
                record["written_at"],
                "exit" if how in ("normal", "exit3", "raise") else "first_pass",
                how,
            )

    def test_a_scripts_job_names_no_directory_and_tells_directories_apart(self):
        other = os.path.join(self.tmp.name, "elsewhere")
        os.makedirs(other)
        twin = os.path.join(other, "train.py")
        shutil.copy(self.script, twin)
        jobs = [self.records_of([path, "normal"])[0]["job"] for path in (self.script, twin)]
        for job in jobs:
            self.assertNotIn("/", job)
            self.assertRegex(job, rf"^train\.py-[0-9a-f]{{8}}@{re.escape(HOST)}$")
        self.assertNotEqual(jobs[0], jobs[1])

    def test_the_launcher_names_the_same_job(self):
        expected = (self.script, program_job(self.script, HOST), "program")
        for how in ("normal", "sigkill"):
            (record,) = self.records_of(
                ["-m", "autograd_device_logging", self.script, how], STATUS[how]
            )
            self.assertEqual(self.identity(record), expected, how)
            self.assertEqual(record["activated_by"], "by the launcher")

    def test_module_and_command_are_named_as_run(self):
        self.write("trainmod.py", TRAIN.format(wait=2 * RECORD_ON_DISK_WITHIN_S))
        for how in ("normal", "sigkill"):
            (record,) = self.records_of(["-m", "trainmod", how], STATUS[how], cwd=self.tmp.name)
            self.assertEqual(
                self.identity(record), ("-m trainmod", f"-m trainmod@{HOST}", "program"), how
            )
            (record,) = self.records_of(
                ["-c", TRAIN.format(wait=2 * RECORD_ON_DISK_WITHIN_S), how], STATUS[how]
            )
            self.assertEqual(self.identity(record), ("-c", f"-c@{HOST}", "program"), how)

    def test_identity_is_as_the_process_started(self):
        # The environment the job's name and rank come from changes after
        # start-up: every version of the record keeps what it was.
        code = self.write(
            "changes.py",
            """
            import autograd_device_logging, os, torch
            x = torch.ones(2, requires_grad=True)
            (x * 2).sum().backward()
            os.environ["AUTOGRAD_DEVICE_LOGGING_JOB"] = "renamed"
            os.environ["RANK"] = "5"
            """,
        )
        (record,) = self.records_of([code], RANK="1", SLURM_JOB_ID="77")
        self.assertEqual((record["job"], record["job_source"]), ("slurm-77", "slurm"))
        self.assertEqual((record["role"], record["rank"]), ("rank", 1))
        self.assertEqual(record["written_at"], "exit")

    def test_a_spawn_child_is_in_its_parents_job(self):
        script = self.write("spawns.py", SPAWNS)
        records = self.records_of([script])
        self.assertEqual(len(records), 2, records)
        self.assertEqual(
            {(r["job"], r["job_source"]) for r in records}, {(program_job(script, HOST), "program")}
        )
        (parent,) = [r for r in records if r["parent"]["pid"] == os.getpid()]
        (child,) = [r for r in records if r is not parent]
        # Each names what it ran; the child joins the job of its parent's.
        self.assertEqual((parent["program"], child["program"]), (script, "-c"))
        self.assertEqual(child["parent"]["pid"], parent["pid"])
        self.assertEqual(child["parent"]["start_time"], parent["start_time"])
        self.assertTrue(all(r["ran_backward"] for r in records))

    def test_torchrun_ranks_name_the_script_and_the_agent_joins_their_job(self):
        script = self.write(
            "ranks.py",
            """
            import autograd_device_logging
            import torch
            import torch.distributed as dist
            import torch.multiprocessing as mp

            def child(_):
                x = torch.ones(2, requires_grad=True)
                x.sum().backward()

            if __name__ == "__main__":
                dist.init_process_group("gloo")
                x = torch.ones(2, requires_grad=True)
                (x * (dist.get_rank() + 1)).sum().backward()
                if dist.get_rank() == 0:
                    mp.spawn(child, nprocs=1)
                dist.destroy_process_group()
            """,
        )
        # One node's run id is drawn at random at every run, so the ranks
        # are named by their script, the same at every run. The launcher runs
        # torchrun's agent in its own process, so the agent keeps a record too.
        command = [
            "-m",
            "autograd_device_logging",
            "-m",
            "torch.distributed.run",
            *one_node_torchrun(),
            "--nproc-per-node=2",
            script,
        ]
        records = self.records_of(command)
        job = program_job(script, HOST)
        ranks = [r for r in records if r["role"] == "rank" and r["program"] == script]
        (agent,) = [r for r in records if r["role"] == "agent"]
        (spawned,) = [r for r in records if r["program"] == "-c"]
        self.assertEqual(sorted(r["rank"] for r in ranks), [0, 1])
        self.assertEqual({(r["job"], r["job_source"]) for r in ranks}, {(job, "program")})
        # A process a rank starts joins the rank's job, not the agent's.
        (rank0,) = [r for r in ranks if r["rank"] == 0]
        self.assertEqual(spawned["parent"]["pid"], rank0["pid"])
        self.assertEqual(spawned["job"], job)
        # The agent's own start-up knew no run id; the report puts it in the
        # job of the ranks it started.
        self.assertEqual(agent["job"], f"-m torch.distributed.run@{HOST}")
        self.assertEqual({r["parent"]["pid"] for r in ranks}, {agent["pid"]})
        directory = tempfile.mkdtemp(dir=self.tmp.name)
        for i, record in enumerate([*ranks, agent]):
            with open(os.path.join(directory, f"{i}.json"), "w") as f:
                json.dump(record, f)
        jobs = report_modules().fleet_report.summarize_directory(directory)["jobs"]
        self.assertEqual(set(jobs), {job, "(all jobs)"})
        self.assertEqual(jobs[job]["left_out"], {"torchrun agent": 1})
        self.assertEqual(jobs[job]["processes"], 2)
        # Another run of the same launch is the same job.
        again = self.records_of(command)
        self.assertEqual({r["job"] for r in again if r["role"] != "agent"}, {job})


if __name__ == "__main__":
    run_tests()
