# Owner(s): ["module: autograd"]
"""The Prometheus textfile (Note [The Prometheus textfile],
prometheus_text.h) and the report's --prometheus, against the real tools:
node_exporter's textfile collector serves what the library wrote with no
scrape error, promtool finds nothing to fix, and the values are the record's.
The directory is as hostile as the record's (Note [Writing into a directory
that others can write], record_file.h), so the record's shared-directory
cases run against it too."""

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from common_device_logging import (
    ACCELERATOR_LIBRARY,
    BUILD_DIR,
    DEVICE_THREADS_IDLE,
    LIBRARY,
    RECORD_WRITE_WAIT_LIMIT_S,
    WITH_TEST_ACCELERATOR,
    child_env,
    only_record,
    report_modules,
    require_built,
    run_python,
)
from prometheus_client.parser import text_string_to_metric_families
from torch.testing._internal.common_utils import TestCase, run_tests

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USAGE = os.path.join(REPO, "docs", "usage.md")
MONITORING = os.path.join(REPO, "monitoring")
DASHBOARD = os.path.join(MONITORING, "grafana-dashboard.json")
STALL_FSYNC_LIBRARY = os.path.join(BUILD_DIR, "test", "libadl_test_stall_fsync.so")
INSTALL_TOOLS = "apt-get install prometheus-node-exporter prometheus (.ci/run's set-up does)"

# Passes of every class but multi-accelerator, then both events.
PASSES = """
a = torch.ones(4, requires_grad=True)
for _ in range(3):
    (a * 2).sum().backward()
b = a.detach().to(d0).requires_grad_()
for _ in range(2):
    (b * 2).sum().backward()
((a.to(d0)).sum() + (a * 3).sum().to(d0)).backward()
((a.to(d0)).sum() + a.to(d1).sum().to(d0)).backward()
"""
# Exits without the exit write: what is on disk came from the write points.
NO_BACKWARD = "import autograd_device_logging, torch\ntorch.ones(2) * 2\n"


def families(text):
    """{sample name: {frozenset(labels.items()): value}} of exposition text."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


def report_to_prometheus(records, path):
    """`report RECORDS --prometheus PATH` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "autograd_device_logging", "report", records, "--prometheus", path],
        env=child_env(""),
        capture_output=True,
        text=True,
        timeout=300,
    )


def cpu_only_passes(served):
    (value,) = [
        v
        for k, v in served["autograd_device_logging_backward_passes_total"].items()
        if dict(k)["class"] == "cpu_only"
    ]
    return value


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(records, textfiles, job, rank):
    """A child that is rank `rank` of `job`, with statistics, keeping its
    record in `records` and its textfile in `textfiles`."""
    return child_env(
        records,
        AUTOGRAD_DEVICE_LOGGING_STATS="1",
        AUTOGRAD_DEVICE_LOGGING_JOB=job,
        AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR=textfiles,
        RANK=rank,
    )


class TestPrometheusTextfile(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "textfiles")
        self.records = os.path.join(self.tmp.name, "records")

    def run_child(self, code, **env):
        proc = run_python(
            ["-c", code + DEVICE_THREADS_IDLE],
            child_env(self.records, **{"AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR": self.dir, **env}),
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc

    def prom_files(self, folder=None):
        return sorted(os.listdir(folder or self.dir)) if os.path.isdir(folder or self.dir) else []

    def only_text(self):
        names = self.prom_files()
        self.assertEqual(len(names), 1, names)
        self.assertTrue(names[0].endswith(".prom"), names)
        with open(os.path.join(self.dir, names[0])) as f:
            return f.read()

    def scrape(self, directory):
        """node_exporter's textfile collector over `directory`, scraped once."""
        if NODE_EXPORTER is None:
            self.fail(f"node_exporter is not installed: {INSTALL_TOOLS}")
        for _ in range(5):
            port = free_port()
            server = subprocess.Popen(
                [
                    NODE_EXPORTER,
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--collector.disable-defaults",
                    "--collector.textfile",
                    f"--collector.textfile.directory={directory}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and server.poll() is None:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
                            return families(r.read().decode())
                    except OSError:
                        time.sleep(0.05)
            finally:
                server.kill()
                server.communicate()
        self.fail("node_exporter did not serve on loopback")

    def promtool_clean(self, path):
        if PROMTOOL is None:
            self.fail(f"promtool is not installed: {INSTALL_TOOLS}")
        with open(path, "rb") as f:
            check = subprocess.run(
                [PROMTOOL, "check", "metrics"], stdin=f, capture_output=True, text=True
            )
        self.assertEqual((check.returncode, check.stdout + check.stderr), (0, ""))

    def test_node_exporter_serves_the_counts_of_the_record(self):
        self.run_child(
            WITH_TEST_ACCELERATOR + PASSES,
            AUTOGRAD_DEVICE_LOGGING_STATS="1",
            AUTOGRAD_DEVICE_LOGGING_JOB="train-42",
            RANK="3",
        )
        record = only_record(self, self.records)
        text = self.only_text()
        self.assertTrue(text.endswith("\n"))
        self.promtool_clean(os.path.join(self.dir, self.prom_files()[0]))
        served = self.scrape(self.dir)
        self.assertEqual(served["node_textfile_scrape_error"], {frozenset(): 0.0})
        own = {("training_job", "train-42"), ("rank", "3")}
        passes = served["autograd_device_logging_backward_passes_total"]
        self.assertEqual(
            {dict(k)["class"]: v for k, v in passes.items()},
            {c: float(n) for c, n in record["pass_classes"].items()},
        )
        self.assertEqual(
            {dict(k)["class"]: v for k, v in passes.items()},
            {
                "cpu_only": 3.0,
                "single_accelerator": 2.0,
                "accelerator_cpu": 1.0,
                "multi_accelerator": 1.0,
            },
        )
        self.assertTrue(all(own <= k for k in passes))
        events = served["autograd_device_logging_events_total"]
        self.assertEqual(
            {dict(k)["event"]: v for k, v in events.items()},
            {e: 1.0 for e in record["events"]},
        )
        (info,) = served["autograd_device_logging_info"]
        info = dict(info)
        self.assertEqual(info["torch"], record["torch"]["running"])
        self.assertEqual(
            (info["state"], info["statistics"], info["calling_thread"]), ("exited", "on", "off")
        )
        # Bounded labels only: no pid, host, path or time.
        names = {
            n
            for k in served
            if k.startswith("autograd_")
            for labels in served[k]
            for n, _ in labels
        }
        self.assertLessEqual(
            names,
            {
                "training_job",
                "rank",
                "class",
                "event",
                "torch",
                "torch_built_for",
                "library_version",
                "events_logged_by",
                "state",
                "statistics",
                "threading_cost",
                "calling_thread",
            },
        )

    def test_a_running_jobs_file_follows_its_passes_and_says_when_it_exited(self):
        # CPU passes for 3 s with a 1 s refresh (Note [The textfile is
        # refreshed on an interval]); the file is read while the job runs.
        code = (
            "import autograd_device_logging, torch, time\n"
            "a = torch.ones(4, requires_grad=True)\n"
            "end, n = time.monotonic() + 3, 0\n"
            "while time.monotonic() < end:\n"
            "    (a * 2).sum().backward()\n"
            "    n += 1\n"
            "    time.sleep(0.01)\n"
            "print('PASSES', n, flush=True)\n"
        )
        env = child_env(
            self.records,
            AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR=self.dir,
            AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL="1",
            AUTOGRAD_DEVICE_LOGGING_STATS="1",
        )
        child = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
        )
        seen = []  # (passes, last update, state) while the job ran
        while child.poll() is None:
            names = [n for n in self.prom_files() if n.endswith(".prom")]
            if names:
                with open(os.path.join(self.dir, names[0])) as f:
                    served = families(f.read())
                if "autograd_device_logging_last_update_timestamp_seconds" in served:
                    (info,) = served["autograd_device_logging_info"]
                    ((_, updated),) = served[
                        "autograd_device_logging_last_update_timestamp_seconds"
                    ].items()
                    seen.append((cpu_only_passes(served), updated, dict(info)["state"]))
            time.sleep(0.2)
        out, _ = child.communicate()
        self.assertEqual(child.returncode, 0)
        running = [row for row in seen if row[2] == "active"]
        # Beyond the first pass's write: the counts grew while it ran, and
        # the last update moved with them.
        self.assertGreaterEqual(len({row[0] for row in running}), 2, seen)
        self.assertGreater(max(row[0] for row in running), 1, seen)
        self.assertGreater(max(row[1] for row in running), min(row[1] for row in running))
        total = int(out.split()[-1])
        final = families(self.only_text())
        (info,) = final["autograd_device_logging_info"]
        self.assertEqual(dict(info)["state"], "exited")
        self.assertEqual(cpu_only_passes(final), total)

    def test_a_bad_refresh_interval_is_one_line(self):
        result = self.run_child(
            "import autograd_device_logging, torch\n",
            AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL="soon",
        )
        lines = [l for l in result.stderr.splitlines() if "PROMETHEUS_INTERVAL" in l]
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn(
            "ignoring AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL=soon: use a whole number of "
            "seconds from 0 to 86400; using the default, 15.",
            lines[0],
        )

    def test_the_library_and_the_package_encode_the_same_samples(self):
        # prometheus_text.cpp (C++) and metric_families.py (Python) spell the
        # families once each: the same record gives the same samples, with
        # the measurement's families too.
        self.run_child(
            WITH_TEST_ACCELERATOR + PASSES + "for _ in range(20):\n    (b * 2).sum().backward()\n",
            AUTOGRAD_DEVICE_LOGGING_STATS="1",
            AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING="1",
            AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE="1",
            AUTOGRAD_DEVICE_LOGGING_MEASURE_WARMUP="0",
            AUTOGRAD_DEVICE_LOGGING_MEASURE_SEED="7",
            AUTOGRAD_DEVICE_LOGGING_MEASURE_WASHOUT="0",
        )
        record = only_record(self, self.records)
        self.assertIsNotNone(record["threading_cost"])
        from_library = families(self.only_text())
        metric_families = report_modules_with_metric_families()
        from_python = {}
        for s in metric_families.process_samples(record):
            name = s.family.name
            labels = frozenset((k, v) for k, v in s.labels.items() if v != "")
            from_python.setdefault(name, {})[labels] = float(s.value)
        self.assertEqual(set(from_library), set(from_python))
        for name in from_python:
            self.assertEqual(set(from_library[name]), set(from_python[name]), name)
            for labels, value in from_python[name].items():
                self.assertAlmostEqual(from_library[name][labels], value, places=6, msg=name)
        pairs = from_library["autograd_device_logging_threading_cost_pairs_total"]
        self.assertGreater(sum(pairs.values()), 0)
        # Each family's HELP, TYPE and unit are the same on both sides.
        header = [l for l in self.only_text().splitlines() if l.startswith("#")]
        for family in metric_families.FAMILIES:
            self.assertIn(f"# HELP {family.name} {family.help}", header)
            self.assertIn(f"# TYPE {family.name} {family.type}", header)

    def test_one_file_per_job_and_rank_and_none_without_a_pass(self):
        code = WITH_TEST_ACCELERATOR + "(torch.ones(2, requires_grad=True) * 2).sum().backward()\n"
        for rank in ("0", "0", "1"):  # a restart of rank 0 replaces its file
            self.run_child(code, AUTOGRAD_DEVICE_LOGGING_JOB="j", RANK=rank)
        names = self.prom_files()
        self.assertEqual(len(names), 2, names)
        self.assertEqual([n.split("-")[2] for n in names], ["rank0", "rank1"])
        # A DataLoader worker inherits RANK and runs no pass: it writes none,
        # so it never replaces its rank's counts.
        with open(os.path.join(self.dir, names[0])) as f:
            rank0 = f.read()
        self.assertIn('state="exited"', rank0)
        self.run_child(NO_BACKWARD, AUTOGRAD_DEVICE_LOGGING_JOB="j", RANK="0")
        self.assertEqual(self.prom_files(), names)
        with open(os.path.join(self.dir, names[0])) as f:
            self.assertEqual(f.read(), rank0)
        served = self.scrape(self.dir)
        self.assertEqual(served["node_textfile_scrape_error"], {frozenset(): 0.0})
        self.assertEqual(len(served["autograd_device_logging_info"]), 2)

    def test_any_job_name_is_a_valid_label(self):
        job = 'a "quoted"\\ job\nwith a newline and \xe9'
        self.run_child(
            WITH_TEST_ACCELERATOR + "(torch.ones(2, requires_grad=True) * 2).sum().backward()\n",
            AUTOGRAD_DEVICE_LOGGING_JOB=job,
        )
        (name,) = self.prom_files()
        self.assertRegex(name, r"^autograd_device_logging-[A-Za-z0-9_.-]+-[0-9a-f]{16}\.prom$")
        self.promtool_clean(os.path.join(self.dir, name))
        served = self.scrape(self.dir)
        self.assertEqual(served["node_textfile_scrape_error"], {frozenset(): 0.0})
        (info,) = served["autograd_device_logging_info"]
        self.assertEqual(dict(info)["training_job"], job)

    # -- The directory is shared (the record's cases, test_process_record.py)

    def test_directory_is_created_shared_and_holds_only_prom_files(self):
        os.makedirs(self.dir)
        host = socket.gethostname()
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = f".autograd_device_logging-{host}-{dead.pid}.0123456789abcdef.tmp"
        alive = f".autograd_device_logging-{host}-{os.getpid()}.0123456789abcdef.tmp"
        for name in (stale, alive):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write("x")
        self.run_child(WITH_TEST_ACCELERATOR + PASSES)
        left = self.prom_files()
        self.assertNotIn(stale, left)  # its writer is gone
        self.assertEqual([n for n in left if not n.endswith(".prom")], [alive])
        fresh = os.path.join(self.tmp.name, "new", "textfiles")
        self.run_child(WITH_TEST_ACCELERATOR + PASSES, AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR=fresh)
        self.assertEqual(stat.S_IMODE(os.stat(fresh).st_mode), 0o1777)
        self.assertTrue(all(n.endswith(".prom") for n in os.listdir(fresh)), os.listdir(fresh))

    def test_a_link_planted_at_the_file_name_is_replaced_not_followed(self):
        code = WITH_TEST_ACCELERATOR + PASSES
        self.run_child(code)
        (name,) = self.prom_files()
        victim = os.path.join(self.tmp.name, "precious")
        with open(victim, "w") as f:
            f.write("precious data")
        path = os.path.join(self.dir, name)
        os.remove(path)
        os.symlink(victim, path)
        # Planted at the temporaries' names too.
        host = socket.gethostname()
        for pid in range(os.getpid(), os.getpid() + 50):
            os.symlink(
                victim,
                os.path.join(
                    self.dir, f".autograd_device_logging-{host}-{pid}.0000000000000000.tmp"
                ),
            )
        self.run_child(code)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious data")
        self.assertTrue(stat.S_ISREG(os.lstat(path).st_mode))

    def warnings_of(self, stderr):
        return [line for line in stderr.splitlines() if "autograd_device_logging" in line]

    def test_a_directory_that_is_a_link_is_refused(self):
        elsewhere = os.path.join(self.tmp.name, "elsewhere")
        os.makedirs(elsewhere)
        os.symlink(elsewhere, self.dir)
        proc = self.run_child(WITH_TEST_ACCELERATOR + PASSES)
        (warning,) = self.warnings_of(proc.stderr)
        self.assertIn("Prometheus textfile", warning)
        self.assertIn("textfiles is a symbolic link", warning)
        self.assertEqual(os.listdir(elsewhere), [])
        # The record is another output: written all the same.
        self.assertEqual(only_record(self, self.records)["written_at"], "exit")

    def test_another_users_directory_without_the_sticky_bit_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("giving a directory to another user needs root")
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o777)
        os.chown(self.dir, 65534, 65534)
        proc = self.run_child(WITH_TEST_ACCELERATOR + PASSES)
        (warning,) = self.warnings_of(proc.stderr)
        self.assertIn("belongs to another user", warning)
        self.assertEqual(os.listdir(self.dir), [])
        os.chmod(self.dir, 0o1777)
        proc = self.run_child(WITH_TEST_ACCELERATOR + PASSES)
        self.assertEqual(self.warnings_of(proc.stderr), [])
        self.assertEqual(len(self.prom_files()), 1)

    def test_stale_temporaries_of_another_user_and_links_stay(self):
        if os.geteuid() != 0:
            self.skipTest("giving a file to another user needs root")
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o1777)
        host = socket.gethostname()
        dead = subprocess.Popen(["true"])
        dead.wait()
        theirs = os.path.join(
            self.dir, f".autograd_device_logging-{host}-{dead.pid}.0123456789abcdef.tmp"
        )
        with open(theirs, "w") as f:
            f.write("x")
        os.chown(theirs, 65534, 65534)
        victim = os.path.join(self.tmp.name, "precious")
        with open(victim, "w") as f:
            f.write("precious data")
        link = os.path.join(
            self.dir, f".autograd_device_logging-{host}-{dead.pid}.fedcba9876543210.tmp"
        )
        os.symlink(victim, link)
        self.run_child(WITH_TEST_ACCELERATOR + PASSES)
        left = set(self.prom_files())
        self.assertLessEqual({os.path.basename(theirs), os.path.basename(link)}, left)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious data")

    def test_hung_storage_never_stalls_a_pass_and_exit_waits_at_most_the_bound(self):
        start = time.monotonic()
        proc = self.run_child(
            WITH_TEST_ACCELERATOR
            + "import time\nt = time.monotonic()\n"
            + PASSES
            + "print('PASSES', time.monotonic() - t, flush=True)\n",
            AUTOGRAD_DEVICE_LOGGING_REPORT_DIR="",
            LD_PRELOAD=STALL_FSYNC_LIBRARY,
            ADL_TEST_STALL_FSYNC_SECONDS="600",
        )
        took = float(proc.stdout.split()[-1])
        self.assertLess(took, 2.5, proc.stdout)
        self.assertLess(time.monotonic() - start, 60)
        (warning,) = self.warnings_of(proc.stderr)
        self.assertIn(
            f"not written within {int(RECORD_WRITE_WAIT_LIMIT_S * 1000)} ms at exit", warning
        )


class TestFleetPrometheus(TestCase):
    def test_report_writes_the_fleets_counts_in_the_same_families(self):
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        with tempfile.TemporaryDirectory() as tmp:
            records = os.path.join(tmp, "records")
            textfiles = os.path.join(tmp, "textfiles")
            os.makedirs(textfiles)
            for job, rank in (("a", "0"), ("a", "1"), ("b", "0")):
                env = rank_env(records, textfiles, job, rank)
                code = WITH_TEST_ACCELERATOR + (
                    PASSES
                    if job == "a"
                    else "(torch.ones(2, requires_grad=True) * 2).sum().backward()\n"
                )
                proc = subprocess.run(
                    [sys.executable, "-c", code + DEVICE_THREADS_IDLE],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                self.assertEqual(proc.returncode, 0, proc.stderr)
            out = os.path.join(textfiles, "fleet.prom")
            report = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "autograd_device_logging",
                    "report",
                    records,
                    "--prometheus",
                    out,
                    "--json",
                ],
                env=child_env(""),
                capture_output=True,
                text=True,
                timeout=300,
            )
            self.assertEqual(report.returncode, 0, report.stderr)
            self.assertIn("wrote the counts to", report.stderr)
            summary = json.loads(report.stdout)
            TestPrometheusTextfile.promtool_clean(self, out)
            served = TestPrometheusTextfile.scrape(self, textfiles)
            self.assertEqual(served["node_textfile_scrape_error"], {frozenset(): 0.0})
            # Beside the per-process files, nothing collides: every series
            # of every file is served, none twice.
            written = {}
            for name in os.listdir(textfiles):
                with open(os.path.join(textfiles, name)) as f:
                    for family, rows in families(f.read()).items():
                        for labels in rows:
                            self.assertNotIn(labels, written.get(family, {}), (name, family))
                            written.setdefault(family, {})[labels] = rows[labels]
            self.assertEqual(len(os.listdir(textfiles)), 4)  # 3 processes and the fleet
            self.assertEqual({f: served[f] for f in written}, written)
            per_process = served["autograd_device_logging_backward_passes_total"]
            self.assertEqual({dict(k)["rank"] for k in per_process}, {"0", "1"})
            passes = served["autograd_device_logging_fleet_backward_passes_total"]
            for job in ("a", "b"):
                self.assertEqual(
                    {
                        dict(k)["class"]: v
                        for k, v in passes.items()
                        if dict(k)["training_job"] == job
                    },
                    {c: float(n) for c, n in summary["jobs"][job]["passes_per_class"].items()},
                )
            self.assertEqual(passes[frozenset({("training_job", "a"), ("class", "cpu_only")})], 6.0)
            events = served["autograd_device_logging_fleet_events_total"]
            self.assertEqual(
                events[
                    frozenset({("training_job", "a"), ("event", "torch.autograd.gpu_cpu_backward")})
                ],
                2.0,
            )
            self.assertEqual(
                events[
                    frozenset({("training_job", "b"), ("event", "torch.autograd.gpu_cpu_backward")})
                ],
                0.0,
            )
            self.assertEqual({dict(k)["training_job"] for k in passes}, {"a", "b"})

    def test_a_bad_prometheus_path_is_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = report_to_prometheus(tmp, os.path.join(tmp, "no", "f.prom"))
            self.assertEqual(proc.returncode, 2)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertIn("no such folder", proc.stderr)

    def test_a_fleet_file_node_exporter_would_not_read_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("fleet.txt", ".fleet.prom"):
                proc = report_to_prometheus(tmp, os.path.join(tmp, name))
                self.assertEqual(proc.returncode, 2, name)
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
                self.assertIn("reads only *.prom files", proc.stderr)
                self.assertFalse(os.path.exists(os.path.join(tmp, name)))


def docs_queries():
    """Every PromQL query docs/usage.md gives (its ```promql blocks)."""
    with open(USAGE) as f:
        text = f.read()
    return [" ".join(q.split()) for q in re.findall(r"```promql\n(.*?)```", text, re.S)]


def dashboard_queries():
    """Every query of monitoring/grafana-dashboard.json, its variables given
    the values of "all jobs" and a 1 m rate interval."""
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    return [
        target["expr"].replace("$training_job", ".*").replace("$__rate_interval", "1m")
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


class Started:
    """A server process on a free loopback port, stopped at cleanup."""

    def __init__(self, test, command, ready_path):
        for _ in range(5):
            self.port = free_port()
            self.process = subprocess.Popen(
                [arg.format(port=self.port) for arg in command],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    with urllib.request.urlopen(self.url(ready_path)):
                        test.addCleanup(self.stop)
                        return
                except OSError:
                    time.sleep(0.1)
            self.stop()
        test.fail(f"{command[0]} did not serve on loopback")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self):
        self.process.kill()
        self.process.communicate()


class TestPrometheusServer(TestCase):
    """Debian's Prometheus server with a default scrape (honor_labels:
    false) of node_exporter over a textfile directory that holds the
    per-process files of two jobs and a fleet file: what a dashboard's
    queries, the docs' among them, return over the HTTP API."""

    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        for tool in (PROMETHEUS, NODE_EXPORTER):
            if tool is None:
                self.fail(f"prometheus and node_exporter are not installed: {INSTALL_TOOLS}")
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        records, textfiles = os.path.join(tmp.name, "records"), os.path.join(tmp.name, "textfiles")
        # train-a raises both events on two ranks; train-b runs a CPU pass.
        for job, rank, code in (
            ("train-a", "0", PASSES),
            ("train-a", "1", PASSES),
            ("train-b", "0", "(torch.ones(2, requires_grad=True) * 2).sum().backward()\n"),
        ):
            env = rank_env(records, textfiles, job, rank)
            proc = subprocess.run(
                [sys.executable, "-c", WITH_TEST_ACCELERATOR + code + DEVICE_THREADS_IDLE],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            self.assertEqual(proc.returncode, 0, proc.stderr)
        report = subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "report", records, "--prometheus"]
            + [os.path.join(textfiles, "fleet.prom")],
            env=child_env(""),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(report.returncode, 0, report.stderr)
        exporter = Started(
            self,
            [
                NODE_EXPORTER,
                "--web.listen-address=127.0.0.1:{port}",
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={textfiles}",
            ],
            "/metrics",
        )
        config = os.path.join(tmp.name, "prometheus.yml")
        with open(config, "w") as f:
            # The scrape as a default configuration has it: no honor_labels.
            f.write(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: node\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{exporter.port}']\n"
            )
        self.prometheus = Started(
            self,
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={os.path.join(tmp.name, 'data')}",
                "--web.listen-address=127.0.0.1:{port}",
                "--log.level=error",
            ],
            "/-/ready",
        )
        deadline = time.monotonic() + 60
        while not self.query("autograd_device_logging_fleet_info"):
            self.assertLess(time.monotonic(), deadline, "Prometheus scraped nothing")
            time.sleep(0.2)

    def query(self, promql):
        url = self.prometheus.url("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url) as r:
            answer = json.load(r)
        self.assertEqual(answer["status"], "success", (promql, answer))
        return answer["data"]["result"]

    def test_no_series_carries_an_exported_job_and_each_names_its_training_job(self):
        ours = self.query('{__name__=~"autograd_device_logging_.*"}')
        self.assertTrue(ours)
        for series in ours:
            labels = series["metric"]
            self.assertNotIn("exported_job", labels)
            self.assertNotIn("exported_instance", labels)
            self.assertEqual(labels["job"], "node")  # the scrape's own
            self.assertIn(labels["training_job"], ("train-a", "train-b"))
        self.assertEqual(self.query("node_textfile_scrape_error")[0]["value"][1], "0")

    def test_the_docs_queries_answer_per_training_job(self):
        queries = docs_queries()
        self.assertGreaterEqual(len(queries), 4, queries)
        for promql in queries:
            self.query(promql)  # each one parses and runs
        (changed,) = [q for q in queries if q.endswith("> 0") and "fleet" not in q]
        self.assertEqual(
            {row["metric"]["training_job"] for row in self.query(changed)}, {"train-a"}
        )
        (fleet,) = [q for q in queries if q.endswith("> 0") and "fleet" in q]
        self.assertEqual({row["metric"]["training_job"] for row in self.query(fleet)}, {"train-a"})

    def test_the_dashboards_queries_answer(self):
        queries = dashboard_queries()
        for promql in queries:
            self.query(promql)
        # Its first two panels: the jobs that rely on multithreaded autograd,
        # from the processes' files and from the fleet's.
        for promql in queries[:2]:
            self.assertEqual(
                {(r["metric"]["training_job"], r["metric"]["event"]) for r in self.query(promql)},
                {
                    ("train-a", e)
                    for e in (
                        "torch.autograd.multidevice_backward",
                        "torch.autograd.gpu_cpu_backward",
                    )
                },
            )

    def test_the_fleet_file_and_the_processes_files_agree_without_a_double_count(self):
        per_process = self.query("sum by (training_job) (autograd_device_logging_events_total)")
        fleet = self.query("sum by (training_job) (autograd_device_logging_fleet_events_total)")
        as_dict = lambda rows: {r["metric"]["training_job"]: r["value"][1] for r in rows}
        self.assertEqual(as_dict(per_process), as_dict(fleet))
        self.assertEqual(as_dict(per_process)["train-a"], "4")  # 2 ranks x 2 events


class TestMonitoring(TestCase):
    """monitoring/: the Prometheus rules pass promtool's check and its unit
    tests (monitoring/prometheus-rules.test.yml), and the Grafana dashboard
    asks only for families the library writes (its queries run against a real
    Prometheus in TestPrometheusServer)."""

    def test_the_rules_pass_promtools_check_and_unit_tests(self):
        if PROMTOOL is None:
            self.fail(f"promtool is not installed: {INSTALL_TOOLS}")
        for command in (
            ["check", "rules", "prometheus-rules.yml"],
            ["test", "rules", "prometheus-rules.test.yml"],
        ):
            proc = subprocess.run(
                [PROMTOOL, *command], cwd=MONITORING, capture_output=True, text=True, timeout=120
            )
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertIn("SUCCESS", proc.stdout)

    def test_the_dashboard_asks_only_for_the_librarys_families(self):
        families_module = report_modules_with_metric_families()
        known = {f.name for f in families_module.FAMILIES + families_module.FLEET_FAMILIES}
        queries = dashboard_queries()
        self.assertGreaterEqual(len(queries), 5)
        for promql in queries:
            asked = set(re.findall(r"autograd_device_logging_\w+", promql))
            self.assertTrue(asked, promql)
            self.assertLessEqual(asked, known, promql)
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        variables = {v["name"] for v in dashboard["templating"]["list"]}
        self.assertEqual(variables, {"datasource", "training_job"})
        self.assertEqual(len({p["id"] for p in dashboard["panels"]}), len(dashboard["panels"]))


def report_modules_with_metric_families():
    report_modules()  # makes the stand-in package
    import importlib

    return importlib.import_module("adl_report_only.metric_families")


if __name__ == "__main__":
    run_tests()
