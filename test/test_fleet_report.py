# Owner(s): ["module: autograd"]
"""The fleet report: one record per process, and a report across jobs.

Processes write their records into a shared directory
(AUTOGRAD_DEVICE_LOGGING_REPORT_DIR, or the launcher's --report);
`python -m autograd_device_logging report DIR` sums them up per job.
"""

import collections
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import jsonschema
from common_device_logging import (
    ACCELERATOR_LIBRARY,
    BUILD_DIR,
    LIBRARY,
    RECORD_SCHEMA,
    WITH_TEST_ACCELERATOR,
    child_env,
    known_values_outside_the_schema,
    one_node_torchrun,
    program_job,
    report_modules,
    require_built,
    synthetic_record,
)
from torch.testing._internal.common_utils import TestCase, run_tests

MULTIDEVICE = "torch.autograd.multidevice_backward"
GPU_CPU = "torch.autograd.gpu_cpu_backward"

# Passes on the test accelerator, then the record, written before os._exit
# (Note [Children skip interpreter finalization] in the main suite).
BOTH_EVENTS = """
a = torch.ones(4, requires_grad=True)
((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward()   # both events
(a * 2).sum().backward()                                          # cpu_only
"""
GPU_CPU_ONLY = """
a = torch.ones(4, requires_grad=True)
(a.to(d0) * 2).sum().backward()                                   # gpu_cpu
"""
WRITE_AND_EXIT = """
import os, sys
assert autograd_device_logging.write_process_record()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""
# A CPU-only program that ends normally: its record is written at exit.
CPU_ONLY_PROGRAM = """
import autograd_device_logging
import torch
x = torch.ones(3, requires_grad=True)
(x * 2).sum().backward()
(x * 3).sum().backward()
"""


def report(report_dir, *args):
    return subprocess.run(
        [sys.executable, "-m", "autograd_device_logging", "report", report_dir, *args],
        env=child_env(report_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )


class TestFleetReport(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")

    def records(self):
        # DIR/.tmp holds the writers' temporary files, none left once they
        # finished (Note [The per-process record]).
        self.assertEqual(os.listdir(os.path.join(self.dir, ".tmp")), [])
        names = sorted(n for n in os.listdir(self.dir) if n != ".tmp")
        self.assertTrue(all(n.endswith(".json") and not n.startswith(".") for n in names), names)
        out = []
        for name in names:
            with open(os.path.join(self.dir, name)) as f:
                out.append(json.load(f))
        return out

    def summary(self):
        proc = report(self.dir, "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout)

    def assert_valid_under_the_schema(self, record):
        jsonschema.validate(record, RECORD_SCHEMA)
        self.assertEqual(known_values_outside_the_schema(record), [])
        self.assertIsNotNone(report_modules().record_fields.parse_record(record))

    def test_concurrent_processes_are_counted_exactly(self):
        plan = [
            ("train-a", BOTH_EVENTS, "1"),
            ("train-a", BOTH_EVENTS, "1"),
            ("train-a", BOTH_EVENTS, "1"),
            ("train-b", GPU_CPU_ONLY, "0"),
            ("train-b", GPU_CPU_ONLY, "0"),
            ("eval", "(torch.ones(2, requires_grad=True) * 2).sum().backward()\n", "1"),
        ]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WITH_TEST_ACCELERATOR + code + WRITE_AND_EXIT],
                env=child_env(
                    self.dir, AUTOGRAD_DEVICE_LOGGING_JOB=job, AUTOGRAD_DEVICE_LOGGING_STATS=stats
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for job, code, stats in plan
        ]
        for p in procs:
            _, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, err)
        records = self.records()
        self.assertEqual(len(records), len(plan))
        self.assertEqual(len({r["pid"] for r in records}), len(plan))
        for r in records:
            self.assertEqual(r["schema"], "2.3")
            self.assertEqual(r["accelerators"], {"testaccel": 2})
            self.assertEqual(r["activated_by"], "by import")
            self.assertEqual(r["job_source"], "AUTOGRAD_DEVICE_LOGGING_JOB")
            self.assertTrue(r["ran_backward"])
            self.assert_valid_under_the_schema(r)
        jobs = self.summary()["jobs"]
        self.assertEqual(
            jobs["train-a"]["processes_with"], {"multidevice": 3, "gpu_cpu": 3}, jobs["train-a"]
        )
        self.assertEqual(
            jobs["train-a"]["passes_per_class"],
            {"cpu_only": 3, "single_accelerator": 0, "accelerator_cpu": 0, "multi_accelerator": 3},
        )
        self.assertEqual(jobs["train-b"]["processes"], 2)
        self.assertEqual(jobs["train-b"]["processes_with"], {"multidevice": 0, "gpu_cpu": 2})
        self.assertIsNone(jobs["train-b"]["passes_per_class"])  # statistics were off
        self.assertEqual(jobs["eval"]["processes_with"], {"multidevice": 0, "gpu_cpu": 0})
        self.assertEqual(jobs["eval"]["passes_per_class"]["cpu_only"], 1)
        self.assertEqual(jobs["(all jobs)"]["processes"], 6)
        self.assertEqual(jobs["(all jobs)"]["processes_with"], {"multidevice": 3, "gpu_cpu": 5})
        table = report(self.dir).stdout
        self.assertRegex(table, r"train-a +3 +0 +3/3 \(100%\) +3/3 \(100%\) +3 +0 +0 +3 ")
        self.assertRegex(table, r"train-b +2 +0 +0/2 \(0%\) +2/2 \(100%\) +- +- +- +- ")

    def test_record_is_written_at_exit_with_the_program(self):
        script = os.path.join(self.tmp.name, "train.py")
        with open(script, "w") as f:
            f.write(CPU_ONLY_PROGRAM)
        env = child_env(self.dir, AUTOGRAD_DEVICE_LOGGING_STATS="1")
        del env["AUTOGRAD_DEVICE_LOGGING_REPORT_DIR"]  # the launcher's --report instead
        proc = subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "--report", self.dir, script, "x"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        (record,) = self.records()
        self.assertEqual(record["program"], script)
        self.assertEqual(record["job"], program_job(script, socket.gethostname()))
        self.assertEqual(record["job_source"], "program")
        self.assertEqual(record["role"], "other")
        self.assertEqual(record["written_at"], "exit")
        self.assertEqual(record["activated_by"], "by the launcher")
        self.assertEqual(record["pass_classes"]["cpu_only"], 2)
        self.assertEqual(record["events"], [])
        self.assertIsNone(record["rank"])

    def test_record_written_early_is_not_written_again_at_exit(self):
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                CPU_ONLY_PROGRAM + "assert autograd_device_logging.write_process_record()\n",
            ],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(len(self.records()), 1)

    def test_two_rank_torchrun_job_is_one_job_with_two_ranks(self):
        script = os.path.join(self.tmp.name, "ranks.py")
        with open(script, "w") as f:
            f.write(
                textwrap.dedent(
                    """
                    import torch
                    import torch.distributed as dist
                    dist.init_process_group("gloo")
                    x = torch.ones(2, requires_grad=True)
                    (x * (dist.get_rank() + 1)).sum().backward()
                    dist.destroy_process_group()
                    """
                )
            )
        env = child_env(self.dir)
        del env["AUTOGRAD_DEVICE_LOGGING_REPORT_DIR"]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                *one_node_torchrun(),
                "--nproc-per-node=2",
                "-m",
                "autograd_device_logging",
                "--report",
                self.dir,
                script,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        records = self.records()
        self.assertEqual(sorted(r["rank"] for r in records), [0, 1])
        self.assertEqual({r["world_size"] for r in records}, {2})
        jobs = self.summary()["jobs"]
        self.assertEqual(len(jobs), 2, jobs)  # the run, and all jobs
        (run,) = [j for j in jobs if j != "(all jobs)"]
        self.assertEqual(jobs[run]["processes"], 2)
        self.assertEqual(jobs[run]["ranks"], 2)

    def test_launcher_report_reaches_the_ranks_torchrun_starts(self):
        # The launcher as torchrun's parent: its --report DIR must reach the
        # ranks, which load the library through their own import of the
        # package (the launcher's variable, not LD_PRELOAD).
        script = os.path.join(self.tmp.name, "ranks.py")
        with open(script, "w") as f:
            f.write(
                "import autograd_device_logging, torch\n"
                "x = torch.ones(2, requires_grad=True)\n"
                "(x * 2).sum().backward()\n"
            )
        env = child_env(self.dir)
        del env["AUTOGRAD_DEVICE_LOGGING_REPORT_DIR"]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "autograd_device_logging",
                "--report",
                self.dir,
                "-m",
                "torch.distributed.run",
                *one_node_torchrun(),
                "--nproc-per-node=2",
                script,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        records = self.records()
        self.assertEqual(sorted(r["rank"] for r in records if r["rank"] is not None), [0, 1])
        # The launcher ran torchrun's agent in its own process: a record with
        # the agent's role, left out of every denominator.
        (agent,) = [r for r in records if r["rank"] is None]
        self.assertEqual(agent["role"], "agent")
        everything = self.summary()["jobs"]["(all jobs)"]
        self.assertEqual(everything["processes"], 2)
        self.assertEqual(everything["left_out"], {"torchrun agent": 1})

    def test_record_counts_every_classified_pass(self):
        # Five passes on one device raise no event, so each is classified,
        # the first off the fast path (the hook's first run) and the rest on
        # it (Note [The per-pass fast path]).
        code = (
            "a = torch.ones(4).to(d0).detach().requires_grad_()\n"
            "for _ in range(5):\n"
            "    (a * 2).sum().backward()\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", WITH_TEST_ACCELERATOR + code + WRITE_AND_EXIT],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        (record,) = self.records()
        self.assertEqual(record["events"], [])
        self.assertEqual(record["passes_classified"], 5)

    def write_records(self, *records):
        os.makedirs(self.dir, exist_ok=True)
        for i, record in enumerate(records):
            with open(os.path.join(self.dir, f"r{i}.json"), "w") as f:
                json.dump(record, f)

    def test_torch_column_is_the_running_release(self):
        self.write_records(synthetic_record(torch={"built_for": "2.12.1", "running": "2.13.0"}))
        summary = self.summary()
        self.assertEqual(summary["jobs"]["j"]["torch"], ["2.13.0"])
        self.assertEqual(list(summary["releases"]), ["2.13.0"])
        self.assertRegex(report(self.dir).stdout, r"\nj +1 .* 2\.13\.0 ")

    def test_cpp_program_writes_a_record(self):
        program = os.path.join(BUILD_DIR, "test", "test_autograd_device_logging_end_to_end")
        require_built(self, program)
        proc = subprocess.run(
            [program, "--gtest_filter=EndToEnd.DeviceAndCpuGiveGpuCpuOnly"],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        (record,) = self.records()
        self.assertEqual(record["program"], program)
        self.assertEqual(record["activated_by"], "linked")
        self.assertEqual(record["events"], [GPU_CPU])
        self.assertEqual(record["accelerators"], {"testaccel": 2})

    def one_real_record(self):
        """The name of the record a CPU-only process leaves in the directory."""
        proc = subprocess.run(
            [sys.executable, "-c", CPU_ONLY_PROGRAM],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        (good,) = [n for n in os.listdir(self.dir) if n.endswith(".json")]
        return good

    def test_bad_records_are_skipped_and_counted(self):
        good = self.one_real_record()
        with open(os.path.join(self.dir, good)) as f:
            text = f.read()
        files = {
            "garbage.json": b"\x00\xffnot json at all",
            "truncated.json": text[: len(text) // 2].encode(),
            "foreign.json": b"[1, 2, 3]",
            "newer.json": json.dumps({**json.loads(text), "schema": "3.0"}).encode(),
            "newer-minor.json": json.dumps(
                {**json.loads(text), "schema": "2.7", "pid": 1, "a_field_of_2_7": [1]}
            ).encode(),
            "null-events.json": json.dumps({**json.loads(text), "events": None}).encode(),
            "float-passes.json": json.dumps(
                {**json.loads(text), "passes_classified": 1.5}
            ).encode(),
            "huge.json": json.dumps({**json.loads(text), "pid": 10**30}).encode(),
            "latin1.json": json.dumps(
                {**json.loads(text), "job": "caf\u00e9"}, ensure_ascii=False
            ).encode("latin-1"),
            "notes.txt": b"not a record: not a .json file",
        }
        for name, data in files.items():
            with open(os.path.join(self.dir, name), "wb") as f:
                f.write(data)
        os.mkdir(os.path.join(self.dir, "a-directory.json"))
        summary = self.summary()
        self.assertEqual(
            summary["skipped"],
            {
                "malformed: not JSON": 3,
                "not a regular file": 1,
                "malformed: not a record": 1,
                "newer schema": 1,
                "malformed: bad field: events": 1,
                "malformed: bad field: passes_classified": 1,
                "malformed: bad field: pid": 1,
            },
        )
        # The newer minor version is read, its unknown field ignored.
        self.assertEqual(summary["jobs"]["(all jobs)"]["processes"], 2)
        table = report(self.dir).stdout
        self.assertIn("3 records skipped: malformed: not JSON", table)
        self.assertIn("1 record skipped: newer schema", table)

    def test_entries_that_are_not_regular_files_are_skipped_without_blocking(self):
        # Anyone may plant these in a shared directory: a FIFO (whose open
        # would wait for a writer forever), a socket, links to both, to a
        # device and to a real record. None is followed or waited on.
        good = self.one_real_record()
        os.mkfifo(os.path.join(self.dir, "x.json"))
        server = socket.socket(socket.AF_UNIX)
        self.addCleanup(server.close)
        server.bind(os.path.join(self.dir, "s.json"))
        for name, target in (
            ("to-fifo.json", "x.json"),
            ("to-socket.json", "s.json"),
            ("to-device.json", "/dev/zero"),
            ("to-record.json", good),
        ):
            os.symlink(target, os.path.join(self.dir, name))
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "report", self.dir, "--json"],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertLess(time.monotonic() - started, 30)
        summary = json.loads(proc.stdout)
        self.assertEqual(summary["skipped"], {"not a regular file": 2, "symbolic link": 4})
        self.assertEqual(summary["jobs"]["(all jobs)"]["processes"], 1)

    def test_unwritable_directory_is_one_warning_and_the_exit_status_is_kept(self):
        blocker = os.path.join(self.tmp.name, "a-file")
        with open(blocker, "w") as f:
            f.write("")
        target = os.path.join(blocker, "records")  # under a regular file
        proc = subprocess.run(
            [sys.executable, "-c", CPU_ONLY_PROGRAM + "import sys\nsys.exit(3)\n"],
            env=child_env(target),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 3)
        self.assertNotIn("Traceback", proc.stderr)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn(f"could not write this process's record into {target}", lines[0])

    def test_json_round_trips(self):
        proc = subprocess.run(
            [sys.executable, "-c", CPU_ONLY_PROGRAM],
            env=child_env(self.dir, AUTOGRAD_DEVICE_LOGGING_JOB='job "with" quotes\n'),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        report = report_modules()
        (record,) = report.record_reader.read_records(self.dir, collections.Counter())
        self.assertEqual(record.job, 'job "with" quotes\n')
        self.assertEqual(self.summary(), report.fleet_report.summarize_directory(self.dir))

    def test_plot_writes_a_png(self):
        subprocess.run(
            [sys.executable, "-c", CPU_ONLY_PROGRAM],
            env=child_env(self.dir, AUTOGRAD_DEVICE_LOGGING_STATS="1"),
            check=True,
            capture_output=True,
        )
        png = os.path.join(self.tmp.name, "passes.png")
        proc = report(self.dir, "--plot", png)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # Without matplotlib: one line naming the package.
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; sys.modules['matplotlib'] = None\n"
                "from autograd_device_logging import fleet_report\n"
                f"sys.exit(fleet_report.main([{self.dir!r}, '--plot', {png!r}]))",
            ],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(
            proc.stderr.splitlines(),
            ["-c: argument --plot: needs matplotlib: pip install matplotlib (--help says more)"],
        )


if __name__ == "__main__":
    run_tests()
