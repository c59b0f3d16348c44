# Owner(s): ["module: autograd"]
"""The fleet report as a person meets it on the command line: the rows that
help a decision, one clear line for every mistake and never a traceback, and
--json under its published schema (schema/fleet_report.schema.json). Each
case runs `python -m autograd_device_logging report` in a fresh process."""

import gc
import io
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from unittest import mock

import jsonschema
from common_device_logging import child_env, report_modules, synthetic_record
from torch.testing._internal.common_utils import TestCase, run_tests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(REPO, "schema", "fleet_report.schema.json")) as _f:
    FLEET_REPORT_SCHEMA = json.load(_f)

GPU_CPU = "torch.autograd.gpu_cpu_backward"
# A threading cost the report summarizes: four pairs of one class.
THREADING_COST = {
    "pairs": {"single_accelerator": [[110, 100], [120, 100], [105, 100], [130, 100]]},
    "not_sampled": {},
    "discarded": {},
}


class TestReportCommandLine(TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")
        os.makedirs(self.dir)

    def write(self, *records):
        for i, record in enumerate(records):
            with open(os.path.join(self.dir, f"r{i}.json"), "w") as f:
                json.dump(record, f)

    def report(self, *args, shell_tail=None):
        command = [sys.executable, "-m", "autograd_device_logging", "report", self.dir, *args]
        if shell_tail is not None:
            command = [
                "bash",
                "-o",
                "pipefail",
                "-c",
                subprocess.list2cmdline(command) + shell_tail,
            ]
        return subprocess.run(
            command,
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=self.tmp.name,
        )

    def assert_one_line(self, proc, status, *parts):
        self.assertEqual(proc.returncode, status, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        for part in parts:
            self.assertIn(part, lines[0])

    def test_the_garbage_is_collected_once_the_report_is_gone(self):
        # Note [The garbage is collected once the report is gone]: no
        # collection walks the report while it is written, and collecting is
        # back on after.
        fleet_report = report_modules().fleet_report
        self.a_fleet()
        seen = []
        write_json = fleet_report.write_json

        def writing(*args):
            seen.append(gc.isenabled())
            return write_json(*args)

        self.assertTrue(gc.isenabled())
        with (
            mock.patch.object(fleet_report, "write_json", writing),
            mock.patch("sys.stdout", io.StringIO()) as out,
        ):
            status = fleet_report.main([self.dir, "--json", "--no-cache"])
        self.assertEqual((status, seen, gc.isenabled()), (0, [False], True))
        self.assertIn('"big"', out.getvalue())

    def test_the_command_ends_once_the_report_and_its_files_are_out(self):
        # Note [The command ends once the report is out]: both command lines
        # end the process without the interpreter's exit (no exit handler
        # runs), with main's status, the report and every file written whole.
        self.a_fleet()
        started = {
            "python -m": "import runpy\n"
            "sys.argv = ['autograd_device_logging', 'report', *sys.argv[1:]]\n"
            "runpy.run_module('autograd_device_logging', run_name='__main__')\n",
            "console script": "from autograd_device_logging.fleet_report import command\n"
            "sys.argv[0] = 'autograd-device-logging-report'\n"
            "sys.exit(command())\n",
        }
        for how, code in started.items():
            with self.subTest(how):
                textfile = os.path.join(self.tmp.name, f"{how}.prom")
                cache = os.path.join(self.tmp.name, f"cache {how}")
                command = [
                    sys.executable,
                    "-c",
                    "import atexit, sys\n"
                    "atexit.register(print, 'exit handlers ran', file=sys.stderr)\n" + code,
                    self.dir,
                    "--json",
                    "--prometheus",
                    textfile,
                    "--cache-dir",
                    cache,
                ]
                for run in ("first", "from the cache"):
                    proc = subprocess.run(
                        command, env=child_env(self.dir), capture_output=True, text=True
                    )
                    self.assertEqual(proc.returncode, 0, proc.stderr)
                    lines = proc.stderr.splitlines()
                    self.assertEqual(len(lines), 1, proc.stderr)
                    self.assertTrue(lines[0].endswith(f": wrote the counts to {textfile}"))
                    report = json.loads(proc.stdout)
                    self.assertEqual(report["jobs"]["big"]["processes"], 3, run)
                    with open(textfile) as f:
                        text = f.read()
                    self.assertIn('"big"', text)
                    self.assertTrue(text.endswith("\n"))
                self.assertTrue(os.listdir(cache))
        # Called from Python, main returns (test_the_garbage_is_collected_...).

    def a_fleet(self):
        """Three jobs that ran backward passes (one measured), two with none."""
        long_name = "/home/someone/projects/" + "very-long-directory-name/" * 6 + "train.py@host"
        self.write(
            synthetic_record(job="big", pid=1, events=[GPU_CPU]),
            synthetic_record(job="big", pid=2),
            synthetic_record(job="big", pid=3, threading_cost=THREADING_COST, schema="2.1"),
            synthetic_record(job="small", pid=4),
            synthetic_record(job=long_name, pid=5, disabled_reason="built for torch 2.12.0"),
            synthetic_record(job=long_name + "2", pid=6),
            synthetic_record(job="compile-worker@host", pid=7, ran_backward=False),
            synthetic_record(job="agent@host", pid=8, role="agent", ran_backward=False),
        )
        return long_name

    def table_rows(self, text):
        """The job table's first column, without the lines under it."""
        lines = text.split("\n\n")[0].splitlines()[1:]
        return [
            l.split("  ")[0] for l in lines if not (l.startswith("... and ") or "not shown" in l)
        ]

    def test_the_table_shows_the_jobs_that_ran_backward_and_counts_the_rest(self):
        long_name = self.a_fleet()
        proc = self.report()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rows = self.table_rows(proc.stdout)
        self.assertIn("big", rows)
        self.assertIn("small", rows)
        self.assertNotIn("compile-worker@host", proc.stdout)
        self.assertIn(
            "3 jobs in which no process ran a backward pass, not shown "
            "(1 agent, 1 no backward, 1 disabled; --all-jobs shows them)",
            proc.stdout,
        )
        # Every line of the tables fits 120 columns; the long name lost its
        # middle, not its ends.
        for line in proc.stdout.splitlines():
            self.assertLessEqual(len(line), 120, line)
        (shortened,) = [r for r in rows if r.startswith("/home")]
        self.assertIn("...", shortened)
        self.assertTrue(shortened.endswith("ost2"), shortened)
        self.assertTrue(rows[-1].startswith("(all jobs)"))
        # --all-jobs shows them; --width 0 keeps every name whole.
        proc = self.report("--all-jobs", "--width", "0")
        rows = self.table_rows(proc.stdout)
        self.assertIn("compile-worker@host", rows)
        self.assertIn(long_name, rows)
        self.assertIn(long_name + "2", rows)
        self.assertIn("agent@host", rows)
        # --top 1: the job with the most processes, and a line for the rest.
        proc = self.report("--top", "1")
        self.assertEqual(self.table_rows(proc.stdout), ["big", "(all jobs)"])
        self.assertIn("... and 2 more jobs with 2 processes that ran a backward pass", proc.stdout)

    def test_plot_mistakes_are_one_line_before_anything_is_read(self):
        self.a_fleet()
        with open(os.path.join(self.tmp.name, "a-file"), "w") as f:
            f.write("x")
        cases = {
            "missing/fleet.png": "no such folder: missing",
            "a-file/fleet.png": "a-file is not a folder",
            "fleet.unknown": "matplotlib cannot write .unknown files; use one of",
            "fleet": "no extension",
            ".": "is a folder",
        }
        for path, says in cases.items():
            self.assert_one_line(self.report("--plot", path), 2, "argument --plot", says)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "missing")))
        # A good path: the plot is written, and one line says where.
        proc = self.report("--plot", "fleet.svg")
        self.assert_one_line(proc, 0, "wrote the plot to", os.path.join(self.tmp.name, "fleet.svg"))
        with open(os.path.join(self.tmp.name, "fleet.svg")) as f:
            self.assertIn("<svg", f.read(2000))

    def test_bad_dates_and_numbers_name_the_option(self):
        self.a_fleet()
        self.assert_one_line(
            self.report("--since", "notadate"),
            2,
            "argument --since: not a date and time: 'notadate'",
        )
        self.assert_one_line(self.report("--until", "2026-13-45"), 2, "argument --until")
        self.assert_one_line(self.report("--top", "-1"), 2, "argument --top")
        self.assertEqual(self.report("--since", "2026-11-01").returncode, 0)

    def test_a_closed_pipe_ends_the_report_quietly(self):
        # Enough jobs that the output outgrows the pipe's buffer.
        self.write(*(synthetic_record(job=f"job-{i:05d}", pid=i) for i in range(3000)))
        for args, tail in ((["--json"], " | head -c 100"), (["--width", "0"], " | head -1")):
            proc = self.report(*args, shell_tail=tail)
            self.assertEqual(proc.stderr, "", args)
            self.assertNotEqual(proc.stdout, "")
            # pipefail: the report's status, 1, as its output is incomplete.
            self.assertEqual(proc.returncode, 1, args)

    def test_malformed_unreadable_and_oversize_are_told_apart(self):
        self.a_fleet()
        with open(os.path.join(self.dir, "half.json"), "w") as f:
            f.write('{"schema": "2.2", "host": ')
        with open(os.path.join(self.dir, "list.json"), "w") as f:
            f.write("[1, 2]")
        with open(os.path.join(self.dir, "secret.json"), "w") as f:
            json.dump(synthetic_record(), f)
        with open(os.path.join(self.dir, "big.json"), "w") as f:
            json.dump(synthetic_record(program="x" * (2 << 20)), f)
        with open(os.path.join(self.dir, "typed.json"), "w") as f:
            json.dump(synthetic_record(ran_backward="yes"), f)
        reader = report_modules().record_reader
        real_open = os.open

        def no_permission(path, *args, **kwargs):
            # As for a file of another user with mode 600: root reads every
            # file, so the refusal is made here.
            if path in ("secret.json", b"secret.json"):
                raise PermissionError(13, "Permission denied", path)
            return real_open(path, *args, **kwargs)

        skipped = Counter()
        # The Python path, whose os.open the refusal replaces; the compiled
        # reading gives the same reasons (test_report_cache.py,
        # TestCompiledFileReading, a name it cannot open included).
        with (
            mock.patch.object(reader.os, "open", no_permission),
            mock.patch.object(reader, "read_files", None),
        ):
            self.assertEqual(len(list(reader.read_records(self.dir, skipped))), 8)
        self.assertEqual(
            skipped,
            {
                "malformed: not JSON": 1,
                "malformed: not a record": 1,
                "malformed: bad field: ran_backward": 1,
                "unreadable": 1,
                "too large": 1,
            },
        )

    def test_json_is_valid_under_its_published_schema(self):
        self.a_fleet()
        with open(os.path.join(self.dir, "broken.json"), "w") as f:
            f.write("{")
        proc = self.report("--json", "--since", "2026-01-01")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        result = json.loads(proc.stdout)
        jsonschema.validate(result, FLEET_REPORT_SCHEMA)
        # What the schema promises is there: every job, the measured cost.
        self.assertIn("compile-worker@host", result["jobs"])
        cost = result["jobs"]["big"]["threading_cost"]["single_accelerator"]
        self.assertEqual((cost["units"], cost["pairs"]), (1, 4))
        # The schema holds the report to it: a field it does not describe,
        # or one missing, fails.
        for broken in (
            {**result, "extra": 1},
            {k: v for k, v in result.items() if k != "filtered"},
            {**result, "jobs": {**result["jobs"], "big": {**result["jobs"]["big"], "ranks": -1}}},
        ):
            with self.assertRaises(jsonschema.ValidationError):
                jsonschema.validate(broken, FLEET_REPORT_SCHEMA)


if __name__ == "__main__":
    run_tests()
