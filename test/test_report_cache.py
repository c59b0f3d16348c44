"""The fleet report's cache (Note [The report's cache], report_cache.py) and
the order it counts in (Note [Reading a fleet in parallel]): a report
from the cache equals a fresh read under any change to the directory, a
cache that cannot be trusted is ignored with one line and rebuilt, the cache
is never in the record directory, and the counts do not depend on the order
in which the records are read."""

import array
import collections
import contextlib
import functools
import importlib
import io
import json
import marshal
import math
import mmap
import os
import random
import stat
import subprocess
import sys
import tempfile
import time
import unittest.mock
import zlib

from common_device_logging import built_unsanitized, child_env, report_modules, synthetic_record
from torch.testing._internal.common_utils import TestCase, run_tests

report = report_modules()
MULTIDEVICE = "torch.autograd.multidevice_backward"
GPU_CPU = "torch.autograd.gpu_cpu_backward"


def random_record(rng, i):
    """One process of a small fleet: ranks that restart (sometimes on
    another torch), agents, processes that ran nothing, measured pairs."""
    job = f"j-{rng.randrange(6)}"
    role = rng.choice(("rank", "rank", "rank", "agent", "other"))
    fields = dict(
        job=job,
        job_source="torchrun",
        host=f"node-{rng.randrange(3)}",
        pid=1000 + i,
        role=role,
        rank=rng.randrange(4) if role == "rank" else None,
        torch={"built_for": "2.9.1", "running": rng.choice(("2.9.1", "2.10.0", "2.13.0"))},
        events=[e for e in (MULTIDEVICE, GPU_CPU) if rng.random() < 0.4],
        ran_backward=rng.random() < 0.9,
        start_time=f"2026-12-0{1 + rng.randrange(3)}T09:00:00Z",
    )
    if role == "agent":
        # A few agents, which ranks of any job name as their parent (Note
        # [An agent joins its workers' job]): a change to one file moves an
        # agent between jobs.
        fields.update(pid=500 + rng.randrange(3), start_time="2026-12-01T09:00:00Z")
    elif role == "rank" and rng.random() < 0.5:
        fields["parent"] = {"pid": 500 + rng.randrange(3), "start_time": "2026-12-01T09:00:00Z"}
    if role == "rank" and rng.random() < 0.7:
        pairs = [[rng.randrange(900, 1300), 1000] for _ in range(rng.randrange(1, 9))]
        fields["threading_cost"] = {
            "pairs": {"single_accelerator": pairs},
            "not_sampled": {},
            "discarded": {},
        }
    return synthetic_record(**fields)


def with_rarer_shapes(r, i, newer_event_every):
    """The i-th random record `r`, some of them of rarer shapes: disabled, with
    an event of a newer minor version, counting passes."""
    if i % 17 == 0:
        r["disabled_reason"] = "no torch"
    if i % newer_event_every == 0:
        r["events"] = r["events"] + ["torch.autograd.newer_event"]
    if i % 29 == 0:
        r["pass_classes"] = {c: i for c in report.record_fields.CLASSES}


class TestReportCache(TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")
        self.cache_root = os.path.join(self.tmp.name, "cache")
        os.makedirs(self.dir)
        self.rng = random.Random(7)
        self.written = 0

    def write(self, name, record=None, text=None):
        """Writes `name` anew (a new inode, as the library's rename does)."""
        if text is None:
            record = random_record(self.rng, self.written) if record is None else record
            text = json.dumps(record)
        self.written += 1
        temporary = os.path.join(self.dir, f".{name}.tmp")
        with open(temporary, "w") as f:
            f.write(text)
        os.replace(temporary, os.path.join(self.dir, name))

    def rewrite_in_place(self, name):
        """Another record of the same size in the same inode, a second
        later: only its mtime tells the change."""
        path = os.path.join(self.dir, name)
        with open(path) as f:
            old = f.read()
        try:
            record = json.loads(old)
        except ValueError:  # junk or truncated: a record first
            self.write(name)
            return self.rewrite_in_place(name)
        st = os.stat(path)
        # Another job of a name as long: j-3 becomes j-4.
        record["job"] = record["job"][:-1] + str((int(record["job"][-1]) + 1) % 10)
        text = json.dumps(record)
        self.assertEqual(len(text), len(old))
        with open(path, "r+") as f:
            f.write(text)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        self.assertEqual(os.stat(path).st_ino, st.st_ino)

    def cache(self):
        return report.report_cache.ReportCache(self.dir, self.cache_root)

    def reports(self, workers=1):
        """(from the cache, fresh) reports of the directory; the cache met no
        problem, and the JSON of each is the same text."""
        fleet_report = report.fleet_report
        cache = self.cache()
        assembled = fleet_report.assemble_directory(self.dir, workers=workers, cache=cache)
        self.assertEqual(cache.problems, [], cache.problems)
        fresh = fleet_report.summarize_directory(self.dir, workers=workers)
        texts = [io.StringIO(), io.StringIO()]
        fleet_report.write_json(assembled, texts[0])
        fleet_report.write_json(fresh, texts[1])
        self.assertEqual(texts[0].getvalue(), texts[1].getvalue())
        return assembled.report(), fresh

    def run_report(self, *args):
        return subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "report", self.dir, *args],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def one_line_then_rebuilt(self, cache_dir, fresh, how, *said):
        """A report from the cache in `cache_dir` gives `fresh` and one line
        on stderr saying each of `said`; the next meets nothing."""
        proc = self.run_report("--json", "--cache-dir", cache_dir)
        self.assertEqual((proc.returncode, proc.stdout), (0, fresh), how)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, f"{how}: {proc.stderr}")
        for words in said:
            self.assertIn(words, lines[0])
        proc = self.run_report("--json", "--cache-dir", cache_dir)
        self.assertEqual((proc.stdout, proc.stderr), (fresh, ""), how)

    @staticmethod
    def damaged(written):
        """A cache file's bytes `written`, damaged each way a file can be."""
        magic = report.report_cache._MAGIC
        return {
            "truncated": written[: len(written) // 2],
            "flipped": written[:-3] + bytes([written[-3] ^ 0x55]) + written[-2:],
            "another version": magic + b"0" * 64 + written[len(magic) + 64 :],
            "junk": b"\x00junk",
            "empty": b"",
        }

    def test_cached_and_fresh_reports_are_equal_under_random_changes(self):
        # With a batch of one file, two and three processes share even the
        # few records here, from their files and from their parts.
        with unittest.mock.patch.object(report.fleet_report, "BATCH", 1):
            written = self.random_changes()
        # Note [The cache's changes]: re-runs wrote changes, and whole files
        # once the changes were too many.
        self.assertGreater(written["changes"], 0, written)
        self.assertGreater(written["whole"], 1, written)

    def random_changes(self, rounds=12, after_each=None):
        names = [f"r{i}.json" for i in range(60)]
        for name in names:
            self.write(name)
        changes = ("add", "remove", "replace", "in place", "truncate", "junk")
        seen = set()
        moved, joined = 0, None
        written = collections.Counter()
        for round in range(rounds):
            cached, fresh = self.reports(workers=1 + round % 3)
            self.assertEqual(cached, fresh, f"round {round}")
            written[self.what_was_written()] += 1
            if after_each is not None:
                after_each()
            now = {j: s["left_out"].get("torchrun agent") for j, s in fresh["jobs"].items()}
            moved += joined is not None and now != joined
            joined = now
            self.assertGreater(fresh["jobs"]["(all jobs)"]["processes"], 0)
            for _ in range(self.rng.randrange(1, 6)):
                change = self.rng.choice(changes)
                seen.add(change)
                if change == "add":
                    name = f"r{len(names)}.json"
                    names.append(name)
                    self.write(name)
                    continue
                name = self.rng.choice(names)
                path = os.path.join(self.dir, name)
                if not os.path.exists(path):
                    self.write(name)
                elif change == "remove":
                    os.unlink(path)
                elif change == "replace":
                    self.write(name)
                elif change == "in place":
                    self.rewrite_in_place(name)
                elif change == "truncate":
                    with open(path, "r+") as f:
                        f.truncate(os.path.getsize(path) // 2)
                else:
                    self.write(name, text="{not json")
        self.assertEqual(seen, set(changes))
        # Agents joined other jobs, and some changed jobs on the way.
        self.assertGreater(moved, 0)
        # Note [A record's part, kept]: every log left is one the index names.
        (folder,) = os.listdir(self.cache_root)
        folder = os.path.join(self.cache_root, folder)
        cache = self.cache()
        options = (None, None, None, False)
        names, keys, _, _ = cache.load(options)
        keys = array.array("q", bytes(keys))
        named, _ = report.file_index.part_logs_of(names, keys, None)
        cache.close()
        prefix = report.report_cache.part_log_name(cache.name_of(options), 0)[:-8]
        logs = {int(n[len(prefix) :], 16) for n in os.listdir(folder) if n.startswith("parts-")}
        self.assertTrue(named)
        self.assertEqual(logs, named)
        cached, fresh = self.reports(workers=2)
        self.assertEqual(cached, fresh)
        return written

    def cache_files(self):
        """(the cache file's path, its changes file's) of the default options."""
        (folder,) = os.listdir(self.cache_root)
        cache = self.cache()
        name = cache.name_of((None, None, None, False))
        folder = os.path.join(self.cache_root, folder)
        changes = report.report_cache.changes_name(name)
        return os.path.join(folder, name), os.path.join(folder, changes)

    def what_was_written(self):
        """ "whole" where the last report wrote the cache's file anew,
        "changes" where it wrote changes to it, "nothing" where neither."""
        path, changes = self.cache_files()
        with open(path, "rb") as f:
            identity = self.identity_of(f.read())
        last = getattr(self, "_last_written", None)
        self._last_written = (
            identity,
            os.stat(changes).st_mtime_ns if os.path.exists(changes) else 0,
        )
        if last is None or last[0] != identity:
            self.assertFalse(os.path.exists(changes))
            return "whole"
        return "nothing" if last == self._last_written else "changes"

    def identity_of(self, data):
        cache = self.cache()
        at = len(cache.tag) + 4
        return data[at : at + report.report_cache.IDENTITY_BYTES]

    def test_changes_give_the_state_the_whole_file_would(self):
        # Note [The cache's changes]: beside this cache, one that always
        # writes the whole file; after every round both load the same index
        # (names and keys, the parts' places aside), reasons and jobs' parts.
        cache_module = report.report_cache
        whole_root = os.path.join(self.tmp.name, "whole")
        layers = []

        def load(root):
            cache = cache_module.ReportCache(self.dir, root)
            names, keys, reasons, jobs = cache.load((None, None, None, False))
            self.assertEqual(cache.problems, [])
            layers.append(cache.loaded.layers)
            cache.close()
            keys = array.array("q", bytes(keys))
            fields = report.file_index.FIELDS
            entries = sorted(
                zip(
                    names.split(b"/")[:-1],
                    (tuple(keys[i : i + 4]) for i in range(0, len(keys), fields)),
                )
            )
            # A summary's marshal may mark a shared object or not: the
            # summary itself is the same.
            jobs = {j: (p[0] and marshal.loads(p[0]), *p[1:]) for j, p in jobs.items()}
            return entries, reasons, jobs

        def whole_too():
            with unittest.mock.patch.object(self, "cache_root", whole_root):
                self.whole_report()
            self.assertEqual(load(self.cache_root), load(whole_root))

        # Shares that let the layers grow past the file, Note
        # [A re-run adds a layer to the changes]: layers that take away what
        # layers before added, and jobs counted in several.
        with (
            unittest.mock.patch.object(cache_module, "CHANGES_SHARE", 0.25),
            unittest.mock.patch.object(cache_module, "JOB_CHANGES_SHARE", 0.1),
        ):
            written = self.random_changes(rounds=10, after_each=whole_too)
        self.assertGreaterEqual(written["changes"], 6, written)
        self.assertGreaterEqual(max(layers), 4, layers)

    def whole_report(self):
        """A report that writes the cache's whole file, as one whose changes
        would be too many does."""
        cache_module = report.report_cache
        writer = cache_module.ReportCache.writer
        with unittest.mock.patch.object(
            cache_module.ReportCache,
            "writer",
            lambda cache, options, rereading=None: writer(cache, options, None),
        ):
            report.fleet_report.assemble_directory(self.dir, cache=self.cache())

    def test_changes_to_a_file_since_replaced_are_not_applied(self):
        # Note [The cache's changes]: changes name the file they change;
        # beside another file (a report that wrote the whole file meanwhile)
        # they are not used, and nothing is wrong.
        for i in range(40):
            self.write(f"r{i}.json")
        self.reports()
        self.assertEqual(self.what_was_written(), "whole")
        self.rewrite_in_place("r3.json")
        self.reports()
        self.assertEqual(self.what_was_written(), "changes")
        path, changes = self.cache_files()
        with open(changes, "rb") as f:
            stale = f.read()
        for i in range(10, 20):
            os.unlink(os.path.join(self.dir, f"r{i}.json"))
        self.whole_report()
        self.assertEqual(self.what_was_written(), "whole")
        # The changes to the file before, back beside the new one.
        with open(changes, "wb") as f:
            f.write(stale)
        cache = self.cache()
        names, _, _, _ = cache.load((None, None, None, False))
        self.assertEqual(cache.problems, [])
        self.assertEqual(names.count(b"/"), 30)
        cached, fresh = self.reports()
        self.assertEqual(cached, fresh)

    def test_a_job_whose_files_all_went_stays_gone(self):
        # Note [The cache's changes]: the changes name the jobs gone, and a
        # later re-run does not bring them back from the file.
        for job in ("j0", "j1", "j2", "j3", "j5", "j6", "j7", "j8"):
            for i in range(4):
                record = random_record(self.rng, self.written)
                record.update(job=job, role="rank", rank=i)
                record.pop("parent", None)
                self.write(f"{job}{i}.json", record)
        self.reports()
        self.assertEqual(self.what_was_written(), "whole")
        for i in range(4):
            os.unlink(os.path.join(self.dir, f"j2{i}.json"))
        cached, _ = self.reports()
        self.assertEqual(self.what_was_written(), "changes")
        self.assertNotIn("j2", cached["jobs"])
        self.rewrite_in_place("j31.json")  # now in j4
        cached, _ = self.reports()
        self.assertEqual(self.what_was_written(), "changes")
        self.assertNotIn("j2", cached["jobs"])

    def test_changes_grown_to_a_quarter_of_the_file_are_written_whole(self):
        # Note [The cache's changes]: files removed only take entries away
        # (junk here, which changes no job); past a quarter of the file's 42,
        # it is written anew.
        for i in range(30):
            self.write(f"r{i}.json")
        for i in range(12):
            self.write(f"k{i}.json", text="{not json")
        self.reports()
        self.assertEqual(self.what_was_written(), "whole")
        for i in range(10):
            os.unlink(os.path.join(self.dir, f"k{i}.json"))
        self.reports()
        self.assertEqual(self.what_was_written(), "changes")
        os.unlink(os.path.join(self.dir, "k10.json"))
        self.reports()
        self.assertEqual(self.what_was_written(), "whole")

    def test_changes_of_many_layers_are_written_whole(self):
        # Note [The cache's changes]: a re-run adds a layer to the changes
        # (Note [A re-run adds a layer to the changes]) until there are
        # MOST_LAYERS; the next writes the file anew. (Jobs changed in all
        # may be many here.)
        for i in range(40):
            self.write(f"r{i}.json")
        self.reports()
        self.assertEqual(self.what_was_written(), "whole")
        cache_module = report.report_cache
        with (
            unittest.mock.patch.object(cache_module, "MOST_LAYERS", 3),
            unittest.mock.patch.object(cache_module, "JOB_CHANGES_SHARE", 0.01),
        ):
            for layers in (1, 2, 3):
                self.rewrite_in_place(f"r{layers}.json")
                cached, fresh = self.reports()
                self.assertEqual(cached, fresh)
                self.assertEqual(self.what_was_written(), "changes")
                cache = self.cache()
                cache.load((None, None, None, False))
                self.assertEqual(cache.loaded.layers, layers)
                cache.close()
            self.rewrite_in_place("r4.json")
            cached, fresh = self.reports()
            self.assertEqual(cached, fresh)
            self.assertEqual(self.what_was_written(), "whole")

    def test_positions_newly_gone_among_all_entries(self):
        # newly_gone against the positions counted out one by one.
        rng = random.Random(3)
        newly_gone = report.report_cache.newly_gone
        for _ in range(300):
            size = rng.randrange(0, 40)
            gone = sorted(rng.sample(range(size), rng.randrange(0, size + 1)))
            kept = [i for i in range(size) if i not in gone]
            now = sorted(rng.sample(range(len(kept)), rng.randrange(0, len(kept) + 1)))
            got = newly_gone(array.array("q", gone), iter(now))
            self.assertEqual(list(got), [kept[k] for k in now], (gone, now))

    def test_a_file_rewritten_in_place_with_the_same_size_is_read_again(self):
        # The key's mtime alone tells this change (a mutation that leaves it
        # out of the key turns this red).
        for i in range(8):
            self.write(f"r{i}.json", random_record(random.Random(i), i))
        cached, fresh = self.reports()
        self.rewrite_in_place("r3.json")
        cached, fresh = self.reports()
        self.assertEqual(cached, fresh)

    def test_the_command_line_gives_the_same_bytes_from_the_cache(self):
        for i in range(40):
            self.write(f"r{i}.json")
        # Jobs that sort before the row for all jobs, and one after it among
        # them (Assembled.rows puts that row in its place).
        for i, job in enumerate(("!first", "'quoted'", "(all", "(all jobs) too")):
            self.write(f"s{i}.json", synthetic_record(job=job, pid=2000 + i))
        cache_dir = os.path.join(self.tmp.name, "cli-cache")
        first = self.run_report("--json", "--cache-dir", cache_dir)
        self.assertEqual((first.returncode, first.stderr), (0, ""))
        folders = os.listdir(cache_dir)
        self.assertEqual(len(folders), 1)
        folder = os.path.join(cache_dir, folders[0])
        self.assertEqual(stat.S_IMODE(os.stat(folder).st_mode), 0o700)
        self.assertTrue(any(n.startswith("report-") for n in os.listdir(folder)))
        again = self.run_report("--json", "--cache-dir", cache_dir)
        self.assertEqual((again.returncode, again.stderr), (0, ""))
        fresh = self.run_report("--json", "--no-cache")
        self.assertEqual(first.stdout, again.stdout)
        self.assertEqual(first.stdout, fresh.stdout)
        jobs = list(json.loads(first.stdout)["jobs"])
        self.assertEqual(jobs, sorted(jobs))
        self.assertEqual(jobs[2:5], ["(all", "(all jobs)", "(all jobs) too"])

    def cached(self, files, cache_name):
        """(the cache folder, the fresh report, the cache file's path) after
        a report of `files` records with the cache in `cache_name`, which
        gives the fresh report."""
        for i in range(files):
            self.write(f"r{i}.json")
        cache_dir = os.path.join(self.tmp.name, cache_name)
        fresh = self.run_report("--json", "--no-cache").stdout
        self.assertEqual(self.run_report("--json", "--cache-dir", cache_dir).stdout, fresh)
        (folder,) = [os.path.join(cache_dir, n) for n in os.listdir(cache_dir)]
        (name,) = [n for n in os.listdir(folder) if n.startswith("report-")]
        return cache_dir, fresh, os.path.join(folder, name)

    def test_a_cache_that_cannot_be_trusted_is_ignored_with_one_line_and_rebuilt(self):
        cache_dir, fresh, path = self.cached(40, "cli-cache")
        with open(path, "rb") as f:
            written = f.read()
        damaged = self.damaged(written)
        if os.geteuid() != 0:  # root reads a file of mode 0
            damaged["unreadable"] = written
        for how, data in damaged.items():
            os.chmod(path, 0o600)
            with open(path, "wb") as f:
                f.write(data)
            if how == "unreadable":
                os.chmod(path, 0)
            self.one_line_then_rebuilt(
                cache_dir, fresh, how, "ignoring the report's cache", "rebuilding it"
            )

    def test_a_cache_file_that_is_no_regular_file_is_one_line_and_not_waited_on(self):
        # Note [The cache file is mapped, not read]: a FIFO in the file's
        # place is neither waited on (opened for reading, it would wait for
        # a writer) nor mapped.
        cache_dir, fresh, path = self.cached(10, "fifo-cache")
        os.unlink(path)
        os.mkfifo(path, 0o600)
        self.one_line_then_rebuilt(
            cache_dir, fresh, "a FIFO", "ignoring the report's cache", "not a regular file"
        )

    def test_changes_that_cannot_be_trusted_are_ignored_with_one_line_and_rebuilt(self):
        # Note [The cache's changes]: as the file itself.
        for i in range(40):
            self.write(f"r{i}.json")
        cache_dir = os.path.join(self.tmp.name, "cli-cache")
        self.assertEqual(self.run_report("--json", "--cache-dir", cache_dir).returncode, 0)
        for round, how in enumerate(("truncated", "flipped", "another version", "junk")):
            self.rewrite_in_place(f"r{round}.json")
            fresh = self.run_report("--json", "--no-cache").stdout
            self.assertEqual(self.run_report("--json", "--cache-dir", cache_dir).stdout, fresh)
            (folder,) = [os.path.join(cache_dir, n) for n in os.listdir(cache_dir)]
            (path,) = [
                os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".changes")
            ]
            with open(path, "rb") as f:
                damaged = self.damaged(f.read())[how]
            with open(path, "wb") as f:
                f.write(damaged)
            self.one_line_then_rebuilt(
                cache_dir, fresh, how, "ignoring the report's cache", ".changes", "rebuilding it"
            )
            # Rebuilt whole: the changes went.
            self.assertFalse(os.path.exists(path), how)

    def test_a_part_log_is_made_only_in_the_cache_folder(self):
        # A log made before anything opened the cache's folder goes into
        # it, made then, never into the working directory.
        elsewhere = os.path.join(self.tmp.name, "working")
        os.makedirs(elsewhere)
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(elsewhere)
        cache = self.cache()
        self.addCleanup(cache.close)
        log = report.report_cache.PartsLog(cache, cache.name_of((None, None, None, False)))
        self.assertEqual(len(log.extend([("a part",)])), 1)
        log.close()
        self.assertEqual(os.listdir(elsewhere), [])
        self.assertEqual(
            [n for n in os.listdir(cache.folder) if n.startswith("parts-")],
            [report.report_cache.part_log_name(cache.name_of((None, None, None, False)), log.log)],
        )

    def test_a_part_log_gone_or_corrupt_is_read_again_with_one_line(self):
        # Note [A record's part, kept]: a job counted again takes its
        # unchanged records from the logs; a log that is gone or a part not
        # as its CRC says makes the report read those files, the same.
        for i in range(40):
            self.write(f"r{i}.json")
        cache_dir = os.path.join(self.tmp.name, "cli-cache")
        self.assertEqual(self.run_report("--json", "--cache-dir", cache_dir).returncode, 0)
        (folder,) = [os.path.join(cache_dir, n) for n in os.listdir(cache_dir)]
        for how in ("flipped", "gone"):
            self.rewrite_in_place(f"r{3 + len(how)}.json")
            fresh = self.run_report("--json", "--no-cache").stdout
            logs = [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("parts-")]
            self.assertTrue(logs)
            for log in logs:
                if how == "gone":
                    os.unlink(log)
                    continue
                with open(log, "r+b") as f:
                    data = bytearray(f.read())
                    for at in range(0, len(data), 97):
                        data[at] ^= 0x20
                    f.seek(0)
                    f.write(data)
            self.one_line_then_rebuilt(cache_dir, fresh, how, "report's cache")

    def test_the_cache_is_the_users_and_never_in_the_record_directory(self):
        for i in range(10):
            self.write(f"r{i}.json")
        before = sorted(os.listdir(self.dir))
        home = os.path.join(self.tmp.name, "xdg")
        env = child_env(self.dir, XDG_CACHE_HOME=home)
        proc = subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "report", self.dir, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual((proc.returncode, proc.stderr), (0, ""))
        self.assertEqual(sorted(os.listdir(self.dir)), before)
        root = os.path.join(home, "autograd_device_logging", "fleet-report")
        (folder,) = os.listdir(root)
        with open(os.path.join(root, folder, "directory")) as f:
            self.assertEqual(f.read(), os.path.realpath(self.dir) + "\n")
        # Named in DIR: refused before anything is read.
        proc = self.run_report("--cache-dir", os.path.join(self.dir, "cache"))
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--cache-dir must not be in DIR", proc.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)), before)
        # The default in DIR (a home that is the records' folder): not used.
        proc = subprocess.run(
            [sys.executable, "-m", "autograd_device_logging", "report", self.dir, "--json"],
            env=dict(env, XDG_CACHE_HOME=self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0)
        self.assertIn("not using the report's cache", proc.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)), before)

    def test_a_cache_folder_others_may_write_is_not_used(self):
        for i in range(10):
            self.write(f"r{i}.json")
        cache_dir = os.path.join(self.tmp.name, "cli-cache")
        fresh = self.run_report("--json", "--cache-dir", cache_dir).stdout
        (folder,) = [os.path.join(cache_dir, n) for n in os.listdir(cache_dir)]
        for name in os.listdir(folder):
            if name.startswith("report-"):
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(b"forged")
        os.chmod(folder, 0o777)
        proc = self.run_report("--json", "--cache-dir", cache_dir)
        self.assertEqual(proc.stdout, fresh)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("others may write it", lines[0])

    def test_a_cache_folder_that_cannot_be_made_is_one_line(self):
        for i in range(10):
            self.write(f"r{i}.json")
        fresh = self.run_report("--json", "--no-cache").stdout
        a_file = os.path.join(self.tmp.name, "a-file")
        with open(a_file, "w"):
            pass
        proc = self.run_report("--json", "--cache-dir", os.path.join(a_file, "cache"))
        self.assertEqual((proc.returncode, proc.stdout), (0, fresh))
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("not using the report's cache", lines[0])

    def test_a_cache_another_interpreter_wrote_is_not_read(self):
        # marshal's format is the interpreter's (Note [The report's cache]):
        # a file written by another is another version's, never loaded.
        cache_module = report.report_cache
        width = 8 * report.file_index.FIELDS
        state = ([b"r0.json/"], [bytes(width)], {}, {})
        options = (None, None, None, False)
        cache = cache_module.ReportCache(self.dir, self.cache_root)
        cache.save(options, state)
        cache.close()
        again = cache_module.ReportCache(self.dir, self.cache_root)
        loaded = again.load(options)
        self.assertEqual(
            (loaded[0], bytes(loaded[1]), *loaded[2:]), (b"r0.json/", bytes(width), {}, {})
        )
        # Each set of options keeps its own.
        self.assertIsNone(again.load((None, None, ["j-1"], False)))
        again.close()
        self.assertEqual(again.problems, [])
        with unittest.mock.patch.object(cache_module, "_INTERPRETER", "cpython-399 marshal 9"):
            other = cache_module.ReportCache(self.dir, self.cache_root)
        self.assertIsNone(other.load(options))
        other.close()
        self.assertEqual(len(other.problems), 1, other.problems)
        self.assertIn("written by another version", other.problems[0])

    def test_a_rerun_reads_only_the_jobs_whose_files_changed(self):
        # Note [A re-run reads the jobs that changed]: a job none of whose
        # files changed keeps its part; a changed job is read whole.
        jobs = {f"j{j}": [f"j{j}-r{i}.json" for i in range(5)] for j in range(8)}
        for job, names in jobs.items():
            for i, name in enumerate(names):
                record = random_record(self.rng, self.written)
                record.update(job=job, role="rank", rank=i)
                record.pop("parent", None)
                self.write(name, record)
        self.reports()
        reader = report.record_reader
        totals = report.fleet_totals.FleetTotals
        decoded, counted = [], []

        def decoding(data):
            fields = decode_fields(data)
            decoded.append(fields[report.file_index.JOB])
            return fields

        def keeping(*args):
            # Note [Keeping a chunk's records in compiled code]: the plain
            # records are decoded there, each with its job given back.
            kept = keep_records(*args)
            decoded.extend(kept[3])
            return kept

        def counting(self, record):
            counted.append(record.job)
            return add(self, record)

        decode_fields, keep_records, add = reader.decode_fields, reader.keep_records, totals.add
        self.rewrite_in_place("j3-r2.json")  # now in j4
        self.write("j6-r9.json", dict(random_record(self.rng, 0), job="j6", role="other"))
        os.unlink(os.path.join(self.dir, "j1-r0.json"))
        with (
            # Note [Counting from the parts, job by job]: with the cache,
            # the files read are decoded to their fields and kept.
            unittest.mock.patch.object(reader, "decode_fields", decoding),
            unittest.mock.patch.object(reader, "keep_records", keep_records and keeping),
            unittest.mock.patch.object(totals, "add", counting),
            # Every record through add(), where it is seen.
            unittest.mock.patch.object(report.fleet_totals, "count_records", None),
        ):
            cache = self.cache()
            cached = report.fleet_report.summarize_directory(self.dir, cache=cache)
        self.assertEqual(cache.problems, [], cache.problems)
        # Only the changed files are read; j3 lost a file to j4, j6 gained
        # one, j1 lost one: those four jobs' records are counted (the
        # unchanged ones from their parts, Note [A record's part, kept]), no
        # other's.
        self.assertEqual(collections.Counter(decoded), {"j4": 1, "j6": 1})
        self.assertEqual(collections.Counter(counted), {"j3": 4, "j4": 6, "j6": 6, "j1": 4})
        self.assertEqual(cached, report.fleet_report.summarize_directory(self.dir))

    def test_the_cache_keeps_the_jobs_in_name_order(self):
        # Note [The cache keeps the jobs in name order]: the file holds
        # them so, and a re-run puts the jobs it keeps first, as the file
        # held them, the jobs counted again after.
        names = [f"job-{j:03d}" for j in range(40)]
        self.rng.shuffle(names)
        for i, job in enumerate(names):
            record = random_record(self.rng, self.written)
            record.update(job=job, role="rank", rank=0)
            record.pop("parent", None)
            self.write(f"{job}.json", record)
        self.whole_report()
        cache = self.cache()
        jobs = cache.load((None, None, None, False))[3]
        cache.close()
        self.assertEqual(list(jobs), sorted(names))
        self.assertNotEqual(sorted(names), names)  # listed in no such order
        changed = {names[0], names[1], names[2]}
        for job in changed:
            self.write(f"{job}.json", dict(random_record(self.rng, 0), job=job, role="other"))
        cache = self.cache()
        assembled = report.fleet_report.assemble_directory(self.dir, cache=cache)
        self.assertEqual(cache.problems, [], cache.problems)
        order = list(assembled.jobs)
        self.assertEqual(order[: len(names) - 3], sorted(set(names) - changed))
        self.assertEqual(set(order[len(names) - 3 :]), changed)

    def test_what_counting_processes_hand_over_is_taken_between_runs(self):
        # Note [Counting from the parts, job by job]: this process takes the
        # jobs the other counting process handed over after each of its runs
        # of parts, not all once it is done.
        for i in range(40):
            self.write(f"r{i}.json")
        fleet_report = report.fleet_report
        take, give = fleet_report._Readers.take, fleet_report._Counters.give
        waits = []

        def taking(readers, wait):
            if readers.jobs is not None:  # the counting processes'
                waits.append(wait)
            return take(readers, wait)

        with (
            unittest.mock.patch.object(fleet_report, "BATCH", 1),
            unittest.mock.patch.object(fleet_report, "PARTS_PER_LOAD", 2),
            unittest.mock.patch.object(fleet_report._Readers, "take", taking),
            # The other process is given nothing to count, so that this one
            # takes every run (which takes which is a race otherwise).
            unittest.mock.patch.object(
                fleet_report._Counters, "give", lambda counters, shares: give(counters, [])
            ),
        ):
            cached, fresh = self.reports(workers=2)
        self.assertEqual(cached, fresh)
        # A run of two parts at a time, up to the end of a job's group (6
        # jobs here): each run followed by a take that does not wait, then
        # one that waits for the end.
        self.assertEqual(waits, [False] * (len(waits) - 1) + [True])
        self.assertGreaterEqual(len(waits) - 1, 3, waits)


class TestCompiledFileReading(TestCase):
    """Note [Reading the files in compiled code]: read_files and the Python
    path give the same records, reasons and cache, entry for entry."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")
        os.makedirs(self.dir)
        self.rng = random.Random(11)
        for i in range(40):
            self.write(f"r{i}.json", json.dumps(random_record(self.rng, i)))
        self.write("junk.json", "{not json")
        self.write("empty.json", "")
        self.write("truncated.json", json.dumps(random_record(self.rng, 99))[:50])
        self.write("bad-field.json", json.dumps(dict(random_record(self.rng, 98), pid="1")))
        self.write("not-utf8.json", b'{"job": "\xff"}')
        limit = report.record_reader.MAX_RECORD_BYTES
        # The largest record read: exactly MAX_RECORD_BYTES.
        largest = json.dumps(random_record(self.rng, 97))
        self.write("largest.json", " " * (limit - len(largest)) + largest)
        self.write("too-large.json", b" " * limit + b"{}")
        os.symlink(os.path.join(self.dir, "r0.json"), os.path.join(self.dir, "link.json"))
        os.symlink("gone", os.path.join(self.dir, "dangling.json"))
        os.mkfifo(os.path.join(self.dir, "fifo.json"))
        os.mkdir(os.path.join(self.dir, "folder.json"))

    def write(self, name, text):
        mode = "wb" if isinstance(text, bytes) else "w"
        temporary = os.path.join(self.dir, f".{name}.tmp")
        with open(temporary, mode) as f:
            f.write(text)
        os.replace(temporary, os.path.join(self.dir, name))

    def directory_fd(self):
        """A descriptor of the record directory, closed after the test."""
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        return fd

    def record_names(self):
        """The names of the records written as r<i>.json, as bytes."""
        return [n.encode() for n in sorted(os.listdir(self.dir)) if n.startswith("r")]

    def compiled(self, compiled):
        """The compiled reading and index as built, or the Python path."""
        index = report.file_index
        if compiled and index.read_files is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        names = (
            "read_files",
            "scan_directory",
            "list_and_check",
            "changed_groups",
            "names_in",
            "unchanged_entries",
            "keep_unchanged_in_place",
            "spans_in",
            "in_group_order",
            "part_logs",
            "pack_entries",
        )
        stack = contextlib.ExitStack()
        for name in names:
            value = getattr(index, name) if compiled else None
            stack.enter_context(unittest.mock.patch.object(index, name, value))
        reader = report.record_reader
        stack.enter_context(
            unittest.mock.patch.object(reader, "read_files", index.read_files if compiled else None)
        )
        # Note [Keeping a chunk's records in compiled code] and Note [Loading
        # a run of parts in compiled code]
        stack.enter_context(
            unittest.mock.patch.object(
                reader, "keep_records", reader.keep_records if compiled else None
            )
        )
        fleet_report = report.fleet_report
        stack.enter_context(
            unittest.mock.patch.object(
                fleet_report, "load_parts", fleet_report.load_parts if compiled else None
            )
        )
        # Note [Counting the plain records in compiled code] and Note [The
        # jobs' parts made in compiled code]
        totals = report.fleet_totals
        for name in ("count_records", "finish_jobs"):
            stack.enter_context(
                unittest.mock.patch.object(
                    totals, name, getattr(totals, name) if compiled else None
                )
            )
        return stack

    def read(self, compiled):
        """(records as tuples, skipped) as read_records gives them, by
        read_files or by the Python path."""
        reader = report.record_reader
        skipped = collections.Counter()
        with self.compiled(compiled):
            fields = report.record_fields.Record.__slots__
            records = sorted(
                (
                    tuple(getattr(r, f) for f in fields)
                    for r in reader.read_records(self.dir, skipped)
                ),
                key=repr,
            )
        return records, dict(skipped)

    def test_the_same_records_and_reasons_as_the_python_path(self):
        compiled, python = self.read(True), self.read(False)
        self.assertEqual(compiled, python)
        records, skipped = compiled
        self.assertEqual(len(records), 41)
        self.assertEqual(
            skipped,
            {
                "symbolic link": 2,
                "not a regular file": 2,
                "too large": 1,
                "malformed: not JSON": 4,
                "malformed: bad field: pid": 1,
            },
        )

    def test_a_name_that_cannot_be_opened_is_unreadable_both_ways(self):
        # A file that went after the listing, or that this user may not
        # read: the open fails (not with ELOOP), and neither path keeps it.
        reader = report.record_reader
        if reader.read_files is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        fd = self.directory_fd()
        outcomes, _ = reader.read_files(fd, [b"gone.json"], None, reader.MAX_RECORD_BYTES)
        self.assertEqual(outcomes, [(None, "unreadable")])
        with self.assertRaises(FileNotFoundError):
            reader.read_record(b"gone.json", fd, bytearray(reader.MAX_RECORD_BYTES + 1))
        entries = report.file_index.IndexEntries()
        for compiled in (True, False):
            with self.compiled(compiled):
                records = list(reader.read_named(fd, b"gone.json/", collections.Counter(), entries))
            self.assertEqual(records, [])
        self.assertEqual(entries.take(), (b"", b"", {}))

    def index_of(self, root, compiled):
        """The state the report's cache under `root` holds."""
        cache = report.report_cache.ReportCache(self.dir, root)
        state = cache.load((None, None, None, False))
        self.addCleanup(cache.close)
        self.assertEqual(cache.problems, [], compiled)
        names, keys = state[0].split(b"/")[:-1], array.array("q", bytes(state[1]))
        # The parts' logs and offsets are each run's own, and marshal may
        # write the same tuple's references differently: what each part
        # reads back as is the same.
        fields = report.file_index.FIELDS
        cache_name = cache.name_of((None, None, None, False))
        logs = {}
        self.addCleanup(lambda: [os.close(fd) for fd in logs.values()])

        def part_at(log_and_crc, span):
            if not log_and_crc:
                return None
            log = log_and_crc >> 32
            if log not in logs:
                logs[log] = cache.open_log(cache_name, log)
            length = span & 0xFFFFFF
            part = os.pread(logs[log], length, span >> 24)
            self.assertEqual(zlib.crc32(part), log_and_crc & 0xFFFFFFFF)
            return marshal.loads(part)

        entries = sorted(
            zip(
                names,
                (
                    (*keys[i : i + 4], part_at(keys[i + 4], keys[i + 5]))
                    for i in range(0, len(keys), fields)
                ),
            )
        )
        # A job's summary is kept in marshal, whose bytes say which strs
        # were interned (Note [A part's strings are not interned]): its
        # value is the same.
        jobs = {
            job: (None if kept[0] is None else marshal.loads(kept[0]), *kept[1:])
            for job, kept in state[3].items()
        }
        return entries, state[2], jobs

    def test_the_same_index_and_the_same_reuse_under_changes(self):
        root = os.path.join(self.tmp.name, "cache")
        roots = {way: os.path.join(root, way) for way in ("compiled", "python")}
        for round in range(4):
            fresh = report.fleet_report.summarize_directory(self.dir)
            for way, where in roots.items():
                with self.compiled(way == "compiled"):
                    cache = report.report_cache.ReportCache(self.dir, where)
                    self.assertEqual(
                        report.fleet_report.summarize_directory(self.dir, cache=cache),
                        fresh,
                        f"{way}, round {round}",
                    )
                    self.assertEqual(cache.problems, [], cache.problems)
            self.assertEqual(
                self.index_of(roots["compiled"], True), self.index_of(roots["python"], False)
            )
            # Changes: replaced, rewritten in place a second later, removed,
            # turned into a link, turned into junk.
            names = sorted(n for n in os.listdir(self.dir) if n.startswith("r"))
            for name in self.rng.sample(names, 4):
                self.write(name, json.dumps(random_record(self.rng, 200 + round)))
            path = os.path.join(self.dir, self.rng.choice(names))
            if os.path.isfile(path) and not os.path.islink(path):
                st = os.stat(path)
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
            victim = os.path.join(self.dir, self.rng.choice(names))
            if os.path.lexists(victim):
                os.unlink(victim)
            (
                os.symlink("r1.json", victim)
                if round % 2
                else self.write(os.path.basename(victim), "[")
            )

    def kept_log(self):
        """(a part log in a fresh cache with the parts of the directory's
        records, their fields, (group, place, span) triples, open_log)."""
        cache = report.report_cache.ReportCache(self.dir, os.path.join(self.tmp.name, "parts"))
        self.addCleanup(cache.close)
        name = cache.name_of((None, None, None, False))
        log = report.report_cache.PartsLog(cache, name)
        self.assertTrue(log.log)
        fields = []
        for n in sorted(os.listdir(self.dir)):
            if n.startswith("r"):
                with open(os.path.join(self.dir, n), "rb") as f:
                    fields.append(report.record_decoder.decode_fields(f.read()))
        places = log.extend(fields)
        # A part whose CRC is right but that is no record's fields.
        stray = marshal.dumps(("a", "tuple"))
        offset = log.offset
        self.assertTrue(log.append(stray))
        log.close()
        stray_place = (
            log.log << 32 | zlib.crc32(stray),
            offset << report.file_index.SPAN_LENGTH_BITS | len(stray),
        )
        spans = array.array(
            "q", [v for i, place in enumerate(places + [stray_place]) for v in (i // 2, *place)]
        )
        return fields, spans, functools.partial(cache.open_log, name)

    def test_parts_load_back_as_kept_or_not_at_all(self):
        # Note [Loading a run of parts in compiled code]: each part as the
        # fields it was kept from, or None at the first that cannot be.
        load_parts = report.record_decoder.load_parts
        if load_parts is None:
            self.skipTest("no _record_decoding in this build (no simdjson or zlib, or sanitized)")
        fields, spans, open_log = self.kept_log()
        count = len(fields)
        self.assertGreater(count, 10)
        record_fields = report.record_fields.RecordFields
        fds = {}
        self.addCleanup(lambda: [os.close(fd) for fd in fds.values() if fd is not None])

        def load(spans, begin, end, opener=open_log):
            return load_parts(spans, begin, end, fds, opener, record_fields)

        loaded = load(spans, 0, count)
        self.assertEqual(loaded, fields)
        self.assertTrue(all(type(r) is record_fields for r in loaded))
        self.assertEqual(load(spans.tobytes(), 3, 7), fields[3:7])
        self.assertEqual(load(spans, 5, 5), [])
        self.assertEqual(len(fds), 1)
        self.assertIsNone(load(spans, 0, count + 1), "no record's fields")
        for at, change in ((1, lambda v: 0), (1, lambda v: v ^ 1), (2, lambda v: v + 1)):
            # No part kept, a CRC that differs, a part longer than its log.
            broken = array.array("q", spans)
            i = 3 * (count - 1) + at
            broken[i] = change(broken[i])
            self.assertIsNone(load(broken, 0, count), at)
            self.assertEqual(load(broken, 0, count - 1), fields[:-1])
        fds.clear()
        self.assertIsNone(load(spans, 0, 1, lambda log: None), "a log that cannot be opened")
        with self.assertRaises(ValueError):
            load(spans, 2, count + 2)
        fds.clear()
        with self.assertRaises(ZeroDivisionError):
            load(spans, 0, 1, lambda log: 1 // 0)

    def test_a_file_is_read_in_one_read(self):
        # Note [A file is read to the size its key says]: a read that brings
        # the size fstat gave ends the file's reading; asking again for its
        # end was a tenth of reading a file.
        if not os.path.exists("/proc/self/io"):
            self.skipTest("no /proc/self/io to count read calls in")
        fd = self.directory_fd()
        names = self.record_names()
        limit = report.record_reader.MAX_RECORD_BYTES

        def reads():
            with open("/proc/self/io", "rb", buffering=0) as f:
                return int(dict(line.split(b": ") for line in f.read().splitlines())[b"syscr"])

        outcomes = []
        counted = []
        # What reading /proc/self/io itself counts.
        itself = -reads() + reads()
        with self.compiled(True):
            for read in (
                lambda: report.file_index.read_files(fd, names, None, limit)[0],
                lambda: report.record_decoder.keep_records(fd, names, limit, 0, 0)[3],
            ):
                before = reads()
                outcomes.append(read())
                counted.append(reads() - before)
        self.assertEqual(len(outcomes[0]), len(names))
        self.assertTrue(all(type(what) is bytes for _, what in outcomes[0]))
        self.assertEqual(len(outcomes[1]), len(names))
        self.assertEqual(counted, [len(names) + itself] * 2)

    def test_a_parts_strings_are_not_interned(self):
        # Note [A part's strings are not interned]: marshal writes a plain
        # str ("z"), so loading the part interns nothing; record_fields
        # still gives interned ones.
        decoder = report.record_decoder
        if decoder.keep_records is None:
            self.skipTest("no _record_decoding in this build (no simdjson or zlib, or sanitized)")
        fd = self.directory_fd()
        names = self.record_names()
        parts, _, keys, jobs, _ = decoder.keep_records(
            fd, names, report.record_reader.MAX_RECORD_BYTES, 1, 0
        )
        spans = array.array("q", keys)[report.file_index.PART_SPAN :: report.file_index.FIELDS]
        self.assertEqual(len(spans), len(jobs))
        for span, job in zip(spans, jobs):
            part = parts[span >> 24 : (span >> 24) + (span & 0xFFFFFF)]
            at = part.index(job.encode())
            self.assertEqual((part[at - 2] & 0x7F, part[at - 1]), (ord("z"), len(job)))
            self.assertEqual(marshal.loads(part)[report.file_index.JOB], job)
        with open(os.path.join(self.dir, names[0].decode()), "rb") as f:
            job = decoder.record_fields(f.read())[report.file_index.JOB]
        self.assertIs(sys.intern(job), job)

    def test_parts_that_cannot_be_written_leave_no_place_in_their_entries(self):
        # Note [A record's part, kept]: a log that fails to write (a full
        # disk) is closed, and its files' entries name no part.
        class Full(io.RawIOBase):
            def writable(self):
                return True

            def write(self, data):
                raise OSError(28, "No space left on device")

        fd = self.directory_fd()
        listed = report.file_index.scan(fd, None, collections.Counter())[0]
        for compiled in (True, False):
            with self.compiled(compiled):
                cache = report.report_cache.ReportCache(
                    self.dir, os.path.join(self.tmp.name, f"full-{compiled}")
                )
                self.addCleanup(cache.close)
                log = report.report_cache.PartsLog(cache, cache.name_of((None, None, None, False)))
                log.file.close()
                log.file = Full()
                entries = report.file_index.IndexEntries()
                files = sum(
                    report.record_reader.keep_named(fd, listed, collections.Counter(), entries, log)
                )
            self.assertEqual(files, listed.count(b"/"))
            self.assertIsNone(log.file, compiled)
            keys = array.array("q", entries.take()[1])
            fields = report.file_index.FIELDS
            self.assertGreater(len(keys) // fields, 40, compiled)
            self.assertEqual(set(keys[report.file_index.PART_LOG :: fields]), {0}, compiled)
            self.assertEqual(set(keys[report.file_index.PART_SPAN :: fields]), {0}, compiled)

    def test_the_index_operations_agree(self):
        # Note [The files' index]: each bulk operation, compiled and in
        # Python, on an index of every kind of entry.
        index = report.file_index
        if index.scan_directory is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        fd = self.directory_fd()
        entries = index.IndexEntries()

        class Parts:
            # Each record's part at a place of its own, in three logs.
            appended = 0

            def extend(self, fields):
                places = []
                for _ in fields:
                    self.appended += 1
                    log = 1 + self.appended % 3
                    places.append((log << 32 | self.appended, (100 - self.appended) << 24 | 9))
                return places

        with self.compiled(True):
            list(
                report.record_reader.read_named(
                    fd,
                    index.scan(fd, None, collections.Counter())[0],
                    collections.Counter(),
                    entries,
                    Parts(),
                )
            )
        names, key_bytes, _ = entries.take()
        keys = array.array("q", key_bytes)
        fields = report.file_index.FIELDS
        self.assertEqual(len(keys), fields * names.count(b"/"))
        # Some entries changed: another mtime, or another name.
        keys[1] += 1
        names = names.replace(b"r2.json/", b"r2x.json/", 1)
        outcomes = {}
        for compiled in (True, False):
            with self.compiled(compiled):
                skipped = collections.Counter()
                listed, unchanged = index.scan(fd, (names, keys), skipped)
                reasons = {
                    index.group_of(r, True): r
                    for r in ("too large", "malformed: not JSON", "malformed: bad field: pid")
                }
                counted = collections.Counter()
                changed = index.changed_groups_of(names, keys, unchanged, reasons, counted)
                some = set(list(changed)[:1]) | {keys[report.file_index.GROUP + fields * 5]}
                again_unchanged = bytearray(unchanged)
                again = index.names_of(names, keys, again_unchanged, some)
                kept = index.unchanged_entries_of(names, keys, again_unchanged)
                kept_in_place = bytearray(names), array.array("q", keys)
                index.keep_unchanged_only(*kept_in_place, again_unchanged)
                # Two groups of jobs with unchanged entries.
                chosen = set(
                    sorted(
                        g
                        for g, u in zip(keys[index.GROUP :: fields], again_unchanged)
                        if u and not g & 1
                    )[:2]
                )
                shuffled = index.spans_of(names, keys, again_unchanged, None)
                triples = [tuple(shuffled[i : i + 3]) for i in range(0, len(shuffled), 3)]
                random.Random(0).shuffle(triples)
                shuffled = array.array("q", [v for triple in triples for v in triple])
                index.group_ordered(shuffled)
                outcomes[compiled] = (
                    sorted(listed.split(b"/")),
                    bytes(unchanged),
                    dict(skipped),
                    changed,
                    dict(counted),
                    again,
                    bytes(again_unchanged),
                    kept,
                    kept_in_place,
                    index.spans_of(names, keys, again_unchanged, chosen),
                    index.spans_of(names, keys, again_unchanged, None),
                    shuffled,
                    index.part_logs_of(names, keys, again_unchanged),
                    # Checked while listing, the index loaded meanwhile (Note
                    # [Loading the cache while listing]): as scan does both.
                    index.scan_and_check(fd, lambda: (names, keys), collections.Counter()),
                    (listed, unchanged),
                )
        self.assertEqual(outcomes[True], outcomes[False])
        # The parts of every job's entries, in group order, then by place.
        spans, every, shuffled = outcomes[True][-6:-3]
        checked_while_listing, scanned = outcomes[True][-2:]
        self.assertEqual(
            (sorted(checked_while_listing[0].split(b"/")), checked_while_listing[1]),
            (sorted(scanned[0].split(b"/")), scanned[1]),
        )
        self.assertEqual(shuffled, every)
        triples = [tuple(every[i : i + 3]) for i in range(0, len(every), 3)]
        self.assertEqual(triples, sorted(triples))
        groups = keys[report.file_index.GROUP :: fields]
        jobs = [i for i, g in enumerate(groups) if again_unchanged[i] and g % 2 == 0]
        self.assertGreater(len(jobs), 5)
        self.assertEqual(
            sorted(triples),
            sorted(tuple(keys[fields * i + 3 : fields * i + 6]) for i in jobs),
        )
        some_triples = [tuple(spans[i : i + 3]) for i in range(0, len(spans), 3)]
        self.assertTrue(some_triples)
        self.assertEqual(some_triples, [t for t in triples if t[0] in chosen])
        listed, unchanged = outcomes[True][:2]
        self.assertIn(b"r2.json", listed)
        self.assertEqual(unchanged.count(0), 2)
        self.assertTrue(outcomes[True][5])

    def test_entries_gone_are_left_out_in_place_as_python_leaves_them(self):
        # Note [The entries gone are left out in place]: runs of entries
        # kept and gone of every length, the first and the last gone or
        # not, compiled and in Python, each against the entries kept counted
        # out one by one.
        index = report.file_index
        if index.keep_unchanged_in_place is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(11)
        fields = index.FIELDS
        for case in range(200):
            size = rng.randrange(0, 60)
            names = [b"n%d-" % i + b"x" * rng.randrange(0, 12) for i in range(size)]
            keys = [[rng.randrange(-(2**63), 2**63) for _ in range(fields)] for _ in range(size)]
            share = rng.random()
            flags = bytearray(rng.random() < share for _ in range(size))
            expected = (
                b"".join(n + b"/" for n, f in zip(names, flags) if f),
                [v for k, f in zip(keys, flags) if f for v in k],
            )
            for compiled in (True, False):
                with self.compiled(compiled):
                    got_names = bytearray(b"".join(n + b"/" for n in names))
                    got_keys = array.array("q", [v for k in keys for v in k])
                    index.keep_unchanged_only(got_names, got_keys, flags)
                self.assertEqual((bytes(got_names), list(got_keys)), expected, (case, compiled))
        with self.assertRaises(ValueError):
            index.keep_unchanged_in_place(bytearray(b"a/b/"), array.array("q"), bytearray(2))

    def test_parts_are_put_in_group_order_as_python_puts_them(self):
        # Note [What is in order already is merged]: whatever part of the
        # triples is in order already (none, all, a run at the end, a run
        # that ends among equal groups), compiled and Python agree.
        index = report.file_index
        if index.in_group_order is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(5)

        def triples(count):
            return [
                (rng.randrange(-20, 20), rng.randrange(3), rng.randrange(5)) for _ in range(count)
            ]

        cases = [[], triples(1), sorted(triples(50)), triples(50)]
        for head in (0, 1, 7, 40):
            cases.append(triples(head) + sorted(triples(60)))
        cases.append(sorted(triples(30)) + sorted(triples(30)))
        cases.append([(3, 1, 1), (3, 1, 0), (3, 1, 0)])
        for case in cases:
            flat = array.array("q", [v for t in case for v in t])
            compiled = array.array("q", flat)
            index.group_ordered(compiled)
            with unittest.mock.patch.object(index, "in_group_order", None):
                index.group_ordered(flat)
            self.assertEqual(compiled, flat)
            self.assertEqual(
                [tuple(compiled[i : i + 3]) for i in range(0, len(compiled), 3)], sorted(case)
            )

    def test_the_index_operations_check_the_names_against_the_keys(self):
        # Note [The names are split only where they are read]: an operation
        # that splits no name still counts them, and names one more or one
        # fewer than the keys' entries are refused, whether it splits them
        # or not.
        index = report.file_index
        if index.changed_groups is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        keys = array.array("q", range(3 * index.FIELDS))
        calls = {
            "changed_groups": lambda names, flags: index.changed_groups(names, keys, flags),
            "spans_in": lambda names, flags: index.spans_in(names, keys, flags, None),
            "part_logs": lambda names, flags: index.part_logs(names, keys, flags),
            "names_in": lambda names, flags: index.names_in(names, keys, flags, {0}),
        }
        for name, call in calls.items():
            with self.subTest(name):
                call(b"a/b/c/", bytearray(3))
                # A name not "/"-ended is no name.
                call(b"a/b/c/d", bytearray(3))
                for names in (b"a/b/", b"a/b/c/d/"):
                    with self.assertRaisesRegex(ValueError, "differ in length"):
                        call(names, bytearray(3))

    def test_the_names_of_a_large_index_are_counted_exactly(self):
        # Note [The names are counted sixteen bytes at a time]: names over
        # many blocks of 16 bytes (more than 255 of them, ending at every
        # offset a block can) count as many as the keys' entries, not one
        # more or fewer.
        index = report.file_index
        if index.spans_in is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(7)
        cases = [
            b"".join(b"x" * rng.randrange(0, 40) + b"/" for _ in range(count))
            for count in (0, 1, 15, 16, 17, 255, 256, 4097, 5000)
        ]
        # Empty names: every byte a slash, in every block (a byte's count
        # must not wrap).
        cases += [b"/" * count for count in (16 * 255, 16 * 256, 10_001)]
        for names in cases:
            for extra in (b"", b"/", b"yz", b"yz/"):
                listed = names + extra
                entries = listed.count(b"/")
                keys = array.array("q", bytes(8 * index.FIELDS * entries))
                with self.subTest(length=len(listed), extra=extra):
                    index.spans_in(listed, keys, bytearray(entries), None)
                    for wrong in (entries - 1, entries + 1):
                        if wrong < 0:
                            continue
                        with self.assertRaisesRegex(ValueError, "differ in length"):
                            index.spans_in(
                                listed,
                                array.array("q", bytes(8 * index.FIELDS * wrong)),
                                bytearray(wrong),
                                None,
                            )

    def test_the_report_assembled_in_compiled_code_is_pythons(self):
        # Note [Assembling the report in compiled code]: what crosses jobs
        # and the row for all jobs, from random parts of every shape: agents
        # whose parent several jobs name, jobs only agents joined, jobs that
        # counted nothing, names in different orders, no passes or costs,
        # several classes; with and without --job.
        totals = report.fleet_totals
        if totals.cross_jobs is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(11)
        events = ["multidevice_backward", "gpu_cpu_backward"]
        reasons = ["torchrun agent", "filtered", "no job"]
        agent_keys = [("host", rng.randrange(100), f"t{rng.randrange(5)}") for _ in range(60)]

        # Each name also as another object equal to it, which some parts
        # hold (Note [Sums in machine integers where they fit],
        # report_assembly.cpp).
        twins = {name: "".join(list(name)) for name in [*events, *reasons, *totals.CLASSES, "xpu"]}

        def pairs(names):
            chosen = rng.sample(names, rng.randrange(len(names) + 1))
            return tuple(
                (twins[name] if rng.random() < 0.2 else name, rng.randrange(5)) for name in chosen
            )

        def light():
            return (
                rng.randrange(1, 50),
                rng.randrange(1, 20),
                pairs(events),
                None if rng.random() < 0.3 else pairs(list(totals.CLASSES)),
                rng.randrange(3),
                tuple(rng.sample(["2.4.1", "2.13.0", "2.15.0"], rng.randrange(1, 3))),
                pairs(reasons),
                (
                    None
                    if rng.random() < 0.3
                    else tuple(
                        (c, (rng.uniform(-50, 50), rng.randrange(1, 9), 2, 64, rng.uniform(-1, 1)))
                        for c in rng.sample(list(totals.CLASSES) + ["xpu"], rng.randrange(1, 3))
                    )
                ),
            )

        jobs = self.random_parts(rng, light, agent_keys, 400)
        wanted_jobs = set(rng.sample(sorted(jobs), 150))
        outcomes = self.assembled_both_ways(jobs, wanted_jobs)
        self.assertEqual(outcomes[:2], outcomes[2:])
        order, joined = outcomes[0][:2]
        # Agents joined jobs that did not count (in the report all the same),
        # and --job filtered some out.
        self.assertTrue(any(jobs[job][0] is None for job in order))
        self.assertGreater(len(joined), 20)
        self.assertGreater(
            json.loads(outcomes[1][2])["filtered"], json.loads(outcomes[0][2])["filtered"]
        )
        self.assertIn("xpu", json.loads(outcomes[0][3])["threading_cost"])

        # Note [Sums in machine integers where they fit]: where a value is
        # no small exact int, or a part not of the types the cache gives,
        # the compiled sums are Python's.
        def changed_light(job, at, value):
            kept = jobs[job]
            return {job: (*kept[:5], (*kept[5][:at], value, *kept[5][at + 1 :]), *kept[6:])}

        counted = [job for job in sorted(jobs) if jobs[job][0] is not None]
        first, second = counted[:2]
        many_reasons = tuple((f"reason {i}", 1) for i in range(100))
        variants = {
            "processes past 63 bits": {
                **changed_light(first, 0, 2**63 - 1),
                **changed_light(second, 0, 2**63 - 1),
            },
            "a count past 64 bits": changed_light(first, 1, 2**70),
            "a float count": changed_light(first, 4, 1.5),
            "a bool count": changed_light(first, 0, True),
            "pairs in a list": changed_light(first, 2, [("multidevice_backward", 3)]),
            "a name that is no str": changed_light(first, 2, ((7, 1),)),
            "a name of a subclass of str": changed_light(
                first, 2, ((type("Name", (str,), {})("gpu_cpu_backward"), 1),)
            ),
            "more names than kept": changed_light(first, 6, many_reasons),
            "a release row past 64 bits": {
                first: (jobs[first][0], {"2.4.1": [2**64, 1, 1]}, *jobs[first][2:])
            },
            "filtered past 63 bits": {first: (*jobs[first][:4], 2**63 - 1, *jobs[first][5:])},
            "agents in a list": {first: (*jobs[first][:3], list(agent_keys[:2]), *jobs[first][4:])},
        }
        for how, changed in variants.items():
            outcomes = self.assembled_both_ways({**jobs, **changed}, None)
            self.assertEqual(outcomes[0], outcomes[1], how)

    def test_a_column_sorted_in_compiled_code_is_pythons(self):
        # Note [A column of votes sorted in compiled code]: the objects
        # sorted() gives, in its order (equal values as they came: 0.0 and
        # -0.0, the same value twice); None where Python must sort.
        sorted_column = report.fleet_totals.sorted_column
        if sorted_column is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(17)
        values = [rng.choice([0.0, -0.0, 1.5, -math.inf, math.inf]) for _ in range(50)]
        values += [rng.uniform(-100, 100) for _ in range(500)]
        values += [float(rng.randrange(5)) for _ in range(200)]
        rng.shuffle(values)
        rows = [(value, i, rng.random()) for i, value in enumerate(values)]
        for index in (0, 2):
            made = sorted_column(rows, index)
            expected = sorted(row[index] for row in rows)
            self.assertEqual(list(map(id, made)), list(map(id, expected)))
        self.assertEqual(sorted_column([], 0), [])
        for how, (bad, index) in {
            "an int": (rows + [(3, 0, 0.0)], 0),
            "NaN": (rows + [(math.nan, 0, 0.0)], 0),
            "a row too short": (rows + [(1.0,)], 2),
            "a list for a row": (rows + [[1.0, 0, 0.0]], 0),
            "a float subclass": (rows + [(type("F", (float,), {})(1.0), 0, 0.0)], 0),
            "an index below 0": (rows, -1),
        }.items():
            self.assertIsNone(sorted_column(bad, index), how)
        with self.assertRaises(TypeError):
            sorted_column(tuple(rows), 0)
        # over_jobs_of the same with it or without.
        per_class = {"single_accelerator": [(v, 1, 1, 64, -v) for v in values[:301]]}
        classes = report.fleet_totals.CLASSES
        cost_statistics = report.cost_statistics
        self.assertEqual(
            json.dumps(cost_statistics.over_jobs_of(per_class, classes, sorted_column)),
            json.dumps(cost_statistics.over_jobs_of(per_class, classes)),
        )

    @staticmethod
    def random_parts(rng, light, agent_keys, count):
        """`count` random jobs' parts (fleet_totals.KeptJob), each
        counted one with a light()."""
        totals = report.fleet_totals
        jobs = {}
        for i in range(count):
            counted = rng.random() < 0.85
            jobs[f"job-{rng.randrange(10**6):06d}"] = (
                b"summary" if counted else None,
                {
                    r: [rng.randrange(9) for _ in range(1 + len(totals.EVENTS))]
                    for r in rng.sample(["2.4.1", "2.15.0"], rng.randrange(3))
                },
                tuple(rng.sample(agent_keys, rng.randrange(3))),
                tuple(rng.sample(agent_keys, rng.randrange(3))),
                rng.randrange(3),
                light() if counted else None,
                None,
                -1,
            )
        return jobs

    @staticmethod
    def assembled_both_ways(jobs, wanted):
        """What Assembled makes of `jobs` in compiled code, then in Python
        (each with and without --job `wanted`, where given): its order,
        joined, fields and row for all jobs, in the order of their dicts."""
        totals = report.fleet_totals
        outcomes = []
        for compiled in (True, False):
            for chosen in (None, wanted) if wanted is not None else (None,):
                with contextlib.ExitStack() as stack:
                    if not compiled:
                        for name in ("cross_jobs", "sum_lights"):
                            stack.enter_context(unittest.mock.patch.object(totals, name, None))
                    made = totals.Assembled(dict(jobs), collections.Counter(x=2), chosen)
                    outcomes.append(
                        (
                            made.order,
                            list(made.joined.items()),
                            json.dumps(made.fields),
                            json.dumps(made.everything),
                        )
                    )
        return outcomes

    def test_the_lines_kept_are_taken_as_in_python(self):
        # Note [The lines kept are taken in one call]: a line kept stands
        # where it was made for the agents that join its job now; one made
        # for others, none made, and a job named as the row for all jobs are
        # made again, as Python's loop does.
        totals = report.fleet_totals
        if totals.kept_lines is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(13)
        agents = [("host", pid, "t") for pid in range(40)]
        jobs = {}
        for i, job in enumerate([f"job-{i:03d}" for i in range(300)] + [totals.ALL_JOBS]):
            summary = {
                "processes": i,
                "ranks": 1,
                "processes_with": {},
                "passes_per_class": None,
                "processes_counting_passes": 0,
                "torch": ["2.13.0"],
                "left_out": {},
                "threading_cost": None,
            }
            own = tuple(rng.sample(agents, rng.randrange(3)))
            made_for = len(own) + rng.choice((0, 0, 0, 1))
            jobs[job] = (
                marshal.dumps(summary),
                {},
                # A parent few agents are: most agents stay in their job.
                (("host", rng.randrange(38, 60), "t"),) if rng.random() < 0.2 else (),
                own,
                0,
                totals.light_of(summary),
                None if rng.random() < 0.1 else f'{{"kept": {i}}}',
                made_for,
            )
        # A job named as the row for all jobs, its line kept for no agents.
        jobs[totals.ALL_JOBS] = (*jobs[totals.ALL_JOBS][:2], (), (), 0, jobs[totals.ALL_JOBS][5])
        jobs[totals.ALL_JOBS] += ('{"kept": "named as the row for all jobs"}', 0)
        outcomes = []
        for compiled in (True, False):
            with contextlib.ExitStack() as stack:
                if not compiled:
                    stack.enter_context(unittest.mock.patch.object(totals, "kept_lines", None))
                made = totals.Assembled(dict(jobs), collections.Counter(), None)
                outcomes.append(made.lines(made.names()))
        self.assertEqual(outcomes[0], outcomes[1])
        kept = sum(line.startswith('{"kept"') for line in outcomes[0])
        self.assertGreater(kept, 100)
        self.assertGreater(len(outcomes[0]) - kept, 50)
        self.assertEqual(outcomes[0].count(json.dumps(made.everything, sort_keys=True)), 2)

    def test_the_groups_of_many_jobs_are_looked_up_as_in_python(self):
        # The compiled set of groups (GroupSet, file_index.cpp) finds
        # exactly Python's among thousands of random 64-bit groups, both
        # parities, the lowest int64 and groups one apart among them.
        index = report.file_index
        if index.spans_in is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(7)
        groups = [rng.randrange(-(2**63), 2**63) for _ in range(3000)]
        groups += [-(2**63), 0, 1, 2**63 - 1] + [g + 1 for g in groups[:200]]
        count = 4 * len(groups)
        names = b"".join(b"e%d.json/" % i for i in range(count))
        keys = array.array("q")
        for i in range(count):
            keys.extend((i, i, i, groups[i % len(groups)], rng.randrange(1, 2**40), i))
        unchanged = bytearray(rng.randrange(2) for _ in range(count))
        chosen = set(rng.sample(groups, len(groups) // 2)) | {-(2**63), 2**63 - 1}
        outcomes = []
        for compiled in (True, False):
            with self.compiled(compiled):
                flags = bytearray(unchanged)
                outcomes.append(
                    (
                        index.spans_of(names, keys, flags, chosen),
                        index.names_of(names, keys, flags, chosen),
                        bytes(flags),
                    )
                )
        self.assertEqual(outcomes[0], outcomes[1])
        self.assertGreater(len(outcomes[0][1]), count // 8)

    def test_keys_checked_while_listing_are_those_the_python_path_checks(self):
        # Note [The keys are checked while listing]: a thread lists while
        # the index loads, then threads (one per core) stat the index's
        # entries, 20000 at least; here 50, so that a few thousand files
        # start them. Each listed name is looked for first after the entry
        # of the name before it. The outcome is the Python path's, name for
        # name, with the index shuffled (each name found in the table) and
        # in the order the directory lists (each found after the one before,
        # but where a name came, went or was never there). The files are
        # empty: only their keys count.
        if (os.cpu_count() or 1) < 2:
            self.skipTest("one core: the check starts no thread of its own")
        index = report.file_index
        if index.list_and_check is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        many = os.path.join(self.tmp.name, "many")
        os.makedirs(many)
        count = 3001
        for i in range(count):
            os.close(os.open(os.path.join(many, f"f{i}.json"), os.O_WRONLY | os.O_CREAT, 0o600))
        fd = os.open(many, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        listed = index.scan(fd, None, collections.Counter())[0]
        in_listed_order = [n.decode() for n in listed.split(b"/")[:-1]]
        changed = {f"f{i}.json" for i in range(count) if i % 50 == 0 or i % 70 == 0}

        def index_of(order, gone_every):
            # Every 50th file not in the index, every 70th of another mtime,
            # and names the index has that went, one after every
            # `gone_every` names: a name left unchecked shows.
            entries = []
            for at, name in enumerate(order):
                if at % gone_every == 0:
                    entries.append((f"gone{at}.json", (0, 0, at)))
                i = int(name[1:-5])
                if i % 50 == 0:
                    continue
                st = os.lstat(name, dir_fd=fd)
                mtime = st.st_mtime_ns + (1 if i % 70 == 0 else 0)
                entries.append((name, (st.st_size, mtime, index.signed(st.st_ino))))
            names = b"".join(name.encode() + b"/" for name, _ in entries)
            keys = array.array("q")
            for _, key in entries:
                keys.extend((*key, 0, 0, 0))
            return names, keys

        shuffled = list(in_listed_order)
        random.Random(5).shuffle(shuffled)
        table_lookups = importlib.import_module(index.__package__ + "._record_files").table_lookups

        looked_up = {}
        for order, gone_every in ((shuffled, 6), (in_listed_order, 6), (in_listed_order, 997)):
            names, keys = index_of(order, gone_every)
            outcomes = []
            for files_per_thread in (None, 50, 1):
                if files_per_thread is None:
                    with self.compiled(False):
                        to_read, unchanged = index.scan(fd, (names, keys), collections.Counter())
                else:
                    before = table_lookups()
                    to_read, links, others, unchanged = index.list_and_check(
                        fd, lambda: (names, keys), files_per_thread
                    )
                    looked_up[order is shuffled, gone_every, files_per_thread] = (
                        table_lookups() - before
                    )
                    self.assertEqual((links, others), (0, 0))
                outcomes.append("\n".join(sorted(n.decode() for n in to_read.split(b"/") if n)))
                outcomes.append(bytes(unchanged).hex())
            self.assertEqual(outcomes[2:4], outcomes[:2], (order is shuffled, gone_every))
            self.assertEqual(outcomes[4:], outcomes[:2], (order is shuffled, gone_every))
            self.assertEqual(outcomes[0], "\n".join(sorted(changed)))
            self.assertEqual(bytes.fromhex(outcomes[1]).count(1), count - len(changed))
        # Shuffled, nearly every name is looked for in the table; in the
        # listing's order, only those after a name the index has not, or
        # after an entry whose name went, and each thread's first.
        for files_per_thread in (50, 1):
            self.assertGreater(looked_up[True, 6, files_per_thread], count * 9 // 10)
            self.assertLess(looked_up[False, 997, files_per_thread], count // 20)
            self.assertLess(looked_up[False, 6, files_per_thread], count // 4)
        # With every file unchanged, no name is left unchecked.
        for order in (shuffled, in_listed_order):
            keys = array.array("q")
            for name in order:
                st = os.lstat(name, dir_fd=fd)
                keys.extend((st.st_size, st.st_mtime_ns, index.signed(st.st_ino), 0, 0, 0))
            names = b"".join(name.encode() + b"/" for name in order)
            to_read, _, _, unchanged = index.list_and_check(fd, lambda: (names, keys), 50)
            self.assertEqual(to_read, b"")
            self.assertEqual(unchanged.count(1), len(order))
        with self.assertRaises(ValueError):
            index.list_and_check(fd, lambda: (names, keys), 0)

    def test_the_listed_names_are_stated_while_the_index_loads(self):
        # Note [The keys are checked while listing]: the thread that lists
        # stats the names it listed while load() runs, so load() sees stats
        # made before it returns; every listed name is stat'ed once, and the
        # keys are checked as before.
        index = report.file_index
        if index.list_and_check is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        listed_stats = importlib.import_module(index.__package__ + "._record_files").listed_stats
        fd = self.directory_fd()
        every = index.scan(fd, None, collections.Counter())[0]
        count = every.count(b"/")
        self.assertGreater(count, 10)
        keys = array.array("q")
        for name in every.decode().split("/")[:-1]:
            st = os.lstat(name, dir_fd=fd)
            changed = name == "r3.json"
            keys.extend((st.st_size, st.st_mtime_ns + changed, index.signed(st.st_ino), 0, 0, 0))
        before = listed_stats()
        seen = []

        def load():
            deadline = time.monotonic() + 10
            while listed_stats() == before and time.monotonic() < deadline:
                time.sleep(0.001)
            seen.append(listed_stats() - before)
            return every, keys

        to_read, _, _, unchanged = index.list_and_check(fd, load, 1)
        self.assertGreater(seen[0], 0)
        self.assertEqual(listed_stats() - before, count)
        self.assertEqual(to_read, b"r3.json/")
        self.assertEqual(unchanged.count(1), count - 1)

    def test_the_listing_goes_on_whatever_loading_the_index_gives(self):
        # Note [The keys are checked while listing]: load() runs while the
        # thread lists. Without an index, every record name is to read; an
        # error of load() is raised once the listing ends, and so is an
        # index that is not (names, keys) of one length; and the descriptor
        # lists again after each.
        index = report.file_index
        if index.list_and_check is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        fd = self.directory_fd()
        every = index.scan(fd, None, collections.Counter())[0]
        self.assertGreater(every.count(b"/"), 10)
        self.assertEqual(index.list_and_check(fd, lambda: None)[0::3], (every, None))

        def fails():
            raise KeyError("the index")

        with self.assertRaises(KeyError):
            index.list_and_check(fd, fails)
        with self.assertRaises(TypeError):
            index.list_and_check(fd, lambda: b"names")
        with self.assertRaises(ValueError):
            index.list_and_check(fd, lambda: (b"a.json/b.json/", array.array("q", [0] * 6)))
        self.assertEqual(index.list_and_check(fd, lambda: None)[0], every)
        with self.compiled(False):
            self.assertEqual(
                index.scan_and_check(fd, lambda: None, collections.Counter())[0], every
            )


class TestCompiledFileReadingIsBuilt(TestCase):
    def test_an_unsanitized_build_has_the_compiled_reading(self):
        # It needs only Python's headers, which a build of the package has:
        # TestCompiledFileReading then runs rather than skips.
        if not built_unsanitized():
            self.skipTest("a sanitized build leaves out the report's extensions (CMakeLists.txt)")
        self.assertIsNotNone(report.record_reader.read_files)

    def test_the_cache_crc32_is_zlibs(self):
        # Note [The cache's CRC-32 from libdeflate]: where the machine has
        # libdeflate, the cache's CRC-32 is its, and the value zlib's for
        # every length, starting value and kind of buffer; elsewhere zlib's.
        if not built_unsanitized():
            self.skipTest("a sanitized build leaves out the report's extensions (CMakeLists.txt)")
        files = importlib.import_module(report.file_index.__package__ + "._record_files")
        cache = report.report_cache
        if not files.has_libdeflate():
            self.assertIs(cache.crc32, zlib.crc32)
            with self.assertRaises(OSError):
                files.libdeflate_crc32(b"")
            return
        self.assertIs(cache.crc32, files.libdeflate_crc32)
        rng = random.Random(17)
        for length in (0, 1, 7, 15, 16, 17, 63, 64, 65, 255, 4096, 65535, 65536, 1 << 20):
            data = rng.randbytes(length + 3)
            for value in (0, 1, 0xFFFFFFFF, rng.getrandbits(32)):
                for view in (data[:length], memoryview(data)[3:], bytearray(data[1:])):
                    self.assertEqual(
                        files.libdeflate_crc32(view, value), zlib.crc32(view, value), length
                    )
        with tempfile.TemporaryFile() as f:
            f.write(rng.randbytes(100000))
            f.flush()
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapped:
                self.assertEqual(files.libdeflate_crc32(mapped), zlib.crc32(mapped))


class TestCountsDoNotDependOnWhoReadWhat(TestCase):
    def test_the_order_records_are_read_in_does_not_matter(self):
        # Note [Reading a fleet in parallel]: which process reads which file,
        # and whether a part comes from the cache, changes the order in which
        # records are counted, never the report.
        rng = random.Random(3)
        decode = report.record_decoder.decode
        records = [decode(json.dumps(random_record(rng, i)).encode()) for i in range(300)]
        reports = []
        for trial in range(5):
            rng.shuffle(records)
            totals = report.fleet_totals.FleetTotals()
            for r in records:
                totals.add(r)
            reports.append(totals.report())
        self.assertTrue(reports[0]["releases"])
        for trial, result in enumerate(reports[1:], 1):
            self.assertEqual(result, reports[0], f"trial {trial}")

    def test_the_plain_records_counted_in_compiled_code_count_the_same(self):
        # Note [Counting the plain records in compiled code]: add_all counts
        # the plain records itself and hands the others to add(); the
        # report is add()'s, record for record, job by job or shuffled.
        count_records = report.fleet_totals.count_records
        if count_records is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(11)
        decode = report.record_decoder.decode_fields
        fields_type = report.record_fields.RecordFields
        texts = [random_record(rng, i) for i in range(600)]
        for i, r in enumerate(texts):
            with_rarer_shapes(r, i, newer_event_every=23)
            if i % 31 == 0:
                r["pass_classes"] = dict(
                    {c: 1 for c in report.record_fields.CLASSES}, newer_class=2
                )
        records = [fields_type._make(decode(json.dumps(r).encode())) for r in texts]
        counted = []

        def counting(*args):
            counted.append(count_records(*args))
            return counted[-1]

        for trial in range(4):
            if trial % 2:
                rng.shuffle(records)
            else:
                records.sort(key=lambda r: r.job)
            one_by_one = report.fleet_totals.FleetTotals()
            for r in records:
                one_by_one.add(r)
            together = report.fleet_totals.FleetTotals()
            with unittest.mock.patch.object(report.fleet_totals, "count_records", counting):
                for start in range(0, len(records), 50):
                    together.add_all(records[start : start + 50])
            self.assertEqual(together.release_names, one_by_one.release_names)
            self.assertEqual(together.results(), one_by_one.results(), f"trial {trial}")
        # Both ways were taken: a quarter or more counted in compiled code,
        # the others (agents, disabled, newer names, a release met first, a
        # rank met under another release) by add().
        self.assertGreater(sum(counted), len(records))
        self.assertLess(sum(counted), len(records) * 3)

    def test_the_jobs_parts_made_in_compiled_code_are_made_the_same(self):
        # Note [The jobs' parts made in compiled code]: finish_jobs makes the
        # plain jobs' parts and hands the others to the Python path; every
        # part is kept_job's, to the byte (the summary in marshal, the line),
        # and the counts are spent alike.
        totals = report.fleet_totals
        finish_jobs = totals.finish_jobs
        if finish_jobs is None:
            self.skipTest("no _record_files in this build (a sanitized build has none)")
        rng = random.Random(13)
        decode = report.record_decoder.decode
        cost = lambda pairs: {"pairs": pairs, "not_sampled": {}, "discarded": {}}  # noqa: E731
        texts = []
        for i in range(1500):
            r = random_record(rng, i)
            # Jobs of 1 to 10 units and more, so that intervals of every
            # kind are made: none, the range, order statistics.
            r["job"] = f"j-{rng.randrange(40)}"
            if r["role"] == "other" and i % 3:
                # Processes that measured, beside the ranks; a difference of
                # 1 ns is a median of 1e-06 ms, which repr writes with an
                # exponent.
                r["threading_cost"] = cost(
                    {
                        "single_accelerator": [
                            [rng.randrange(990, 1300), 1000] for _ in range(rng.randrange(1, 6))
                        ],
                        "cpu_only": [[1001, 1000]],
                    }
                )
            if i % 37 == 0:
                r["threading_cost"] = cost({"newer_class": [[1100, 1000]]})
            if i % 41 == 0:
                # A release the line escapes: the Python path's.
                r["torch"] = {"built_for": "2.9.1", "running": "2.11.0+c\u00fc"}
            # A newer event is counted by name: the Python path's.
            with_rarer_shapes(r, i, newer_event_every=113)
            texts.append(r)
        records = [decode(json.dumps(r).encode()) for r in texts]
        compiled, in_python = totals.FleetTotals(), totals.FleetTotals()
        for r in records:
            compiled.add(r)
            in_python.add(r)
        made = []

        def finishing(*args):
            made.append(finish_jobs(*args))
            return made[-1]

        with unittest.mock.patch.object(totals, "finish_jobs", finishing):
            ours = totals.finished_jobs(compiled)
        with unittest.mock.patch.object(totals, "finish_jobs", None):
            theirs = totals.finished_jobs(in_python)
        self.assertEqual(list(ours), list(theirs))
        for job, part in theirs.items():
            self.assertEqual(ours[job], part, job)
        for spent in ("jobs", "parents", "agents", "filtered"):
            self.assertEqual(len(getattr(compiled, spent)), 0, spent)
        # Both ways were taken, and every kind of interval was made here.
        self.assertGreater(made[0], len(ours) // 3)
        self.assertLess(made[0], len(ours))
        intervals = set()
        for job, part in ours.items():
            for c in (json.loads(part[6])["threading_cost"] or {}).values():
                interval = c["interval"]
                intervals.add(None if interval is None else interval["meets_level"])
        self.assertEqual(intervals, {None, False, True})
        # A count that its agents take past 64 bits: the Python path's, with
        # nothing popped before.
        for totals_of in (compiled, in_python):
            job = totals_of.jobs["j-big"]
            job.ranks["h\x000"] = totals_of.release_names.index("2.9.1") << 2 | 1
            job.left_out[totals.AGENT_REASON] = 2**63 - 1
            totals_of.agents["j-big"] = [("h", 1, "2026-12-01T09:00:00Z")]
        made.clear()
        with unittest.mock.patch.object(totals, "finish_jobs", finishing):
            ours = totals.finished_jobs(compiled)
        with unittest.mock.patch.object(totals, "finish_jobs", None):
            theirs = totals.finished_jobs(in_python)
        self.assertEqual(made, [0])
        self.assertEqual(ours, theirs)
        self.assertIn('"torchrun agent": 9223372036854775808', ours["j-big"][6])

    def test_counts_made_apart_and_handed_over_give_the_same_report(self):
        # Note [Reading a fleet in parallel]: each reading process counts its
        # own files and hands its counts over (FleetTotals.drain, through
        # marshal, then take), some of them mid-way; the merged report is the
        # one a single process makes, whatever the split, the order in which
        # each process met the torch releases, and the options.
        rng = random.Random(5)
        decode = report.record_decoder.decode
        texts = [random_record(rng, i) for i in range(400)]
        for i, r in enumerate(texts[:60]):
            if r["role"] == "rank" and i % 3 == 0:
                # A newer minor version's event and class, by name; a parent
                # that is an agent of another record.
                r["events"] = r["events"] + ["torch.autograd.newer_event"]
                r["pass_classes"] = dict(
                    {c: i for c in report.record_fields.CLASSES}, newer_class=i
                )
                r["parent"] = {"pid": 1000 + i + 1, "start_time": r["start_time"]}
                texts[i + 1].update(
                    role="agent", host=r["host"], pid=1000 + i + 1, start_time=r["start_time"]
                )
        records = [decode(json.dumps(r).encode()) for r in texts]
        self.assertTrue(any(r.other_events for r in records))
        options = [
            {},
            {"since": "2026-12-02T00:00:00", "jobs": ["j-1", "j-2", "j-3"]},
            {"by_placement": True},
        ]
        for trial in range(9):
            kwargs = options[trial % len(options)]
            whole = report.fleet_totals.FleetTotals(**kwargs)
            for r in records:
                whole.add(r)
            expected = whole.report()
            self.assertTrue(expected["jobs"])
            rng.shuffle(records)
            parts = [report.fleet_totals.FleetTotals(**kwargs) for _ in range(1 + trial % 4)]
            merged = parts[0]
            for i, r in enumerate(records):
                part = parts[rng.randrange(len(parts))]
                part.add(r)
                if part is not merged and rng.random() < 0.02:
                    for piece in part.drain(jobs_per_part=rng.randrange(1, 4)):
                        merged.take(marshal.loads(marshal.dumps(piece)))
            for part in parts[1:]:
                for piece in part.drain(jobs_per_part=rng.randrange(1, 4)):
                    merged.take(marshal.loads(marshal.dumps(piece)))
            self.assertEqual(merged.report(), expected, f"trial {trial}")

    def test_a_restarted_rank_counts_under_its_newest_release(self):
        # Note [A restarted rank counts once, under its newest release]:
        # whichever record is read first.
        decode = report.record_decoder.decode

        def rank(pid, running):
            return decode(
                json.dumps(
                    synthetic_record(
                        job="j",
                        host="h",
                        pid=pid,
                        role="rank",
                        rank=0,
                        torch={"built_for": running, "running": running},
                    )
                ).encode()
            )

        older, newer = rank(1, "2.9.1"), rank(2, "2.10.0+cu130")
        for order in ((older, newer), (newer, older)):
            totals = report.fleet_totals.FleetTotals()
            for r in order:
                totals.add(r)
            result = totals.report()
            self.assertEqual(list(result["releases"]), ["2.10.0+cu130"])
            self.assertEqual(result["jobs"]["j"]["ranks"], 1)


if __name__ == "__main__":
    run_tests()
