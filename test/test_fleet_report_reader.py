# Owner(s): ["module: autograd"]
"""The fleet report as a reader of record directories: offline (no torch,
no library, nothing written), never failing on what a directory holds,
accepting exactly what schema/process_record.schema.json accepts, counting
the processes that ran backward (a restarted rank once), filtering, and
agreeing with DuckDB's read_json on the same records. Hypothesis keeps no
example database (database=None) and its caches in a temporary directory:
tests write nothing into the checkout.
"""

import atexit
import contextlib
import functools
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import types

import duckdb
import hypothesis
import hypothesis.configuration
import hypothesis.strategies as st
import jsonschema
from common_device_logging import (
    BUILD_DIR,
    LIBRARY,
    PACKAGE_ROOT,
    RECORD_SCHEMA,
    TEST_DIR,
    built_with_simdjson,
    child_env,
    known_values_outside_the_schema,
    report_modules,
    require_built,
    synthetic_record,
)
from torch.testing._internal.common_utils import TestCase, run_tests

# Hypothesis keeps caches (its Unicode tables) in ./.hypothesis unless told
# otherwise: tests write nothing into the checkout.
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="adl-hypothesis-")
hypothesis.configuration.set_hypothesis_home_dir(_HYPOTHESIS_HOME)
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, ignore_errors=True)

report = report_modules()
MULTIDEVICE = "torch.autograd.multidevice_backward"
GPU_CPU = "torch.autograd.gpu_cpu_backward"
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
FIELDS = sorted(synthetic_record())


def mutated_records():
    """Valid records with some fields deleted or replaced by any JSON, or
    given plausible wrong values."""
    plausible = st.sampled_from(
        [None, "", "x", "2.0", "2.1", "3.0", "1.0", 1, 0, -1, 2.0, 2.5, True, [], {}, [MULTIDEVICE]]
        + [[MULTIDEVICE, MULTIDEVICE], ["torch.autograd.other"], {"running": 1}]
        + [{"cpu_only": 1}, "2026-12-01T09:00:00Z\n", "rank", "agent", "torch", 2**64]
    )
    return st.builds(
        lambda base, changes, dropped: {
            **{k: v for k, v in base.items() if k not in dropped},
            **changes,
        },
        st.just(synthetic_record()),
        st.dictionaries(st.sampled_from(FIELDS + ["extra"]), JSON | plausible, max_size=3),
        st.sets(st.sampled_from(FIELDS), max_size=2),
    )


# A measured threading cost (schema 2.1) and plausible wrong values of its
# parts, for the schema-equivalence test.
THREADING_COST = {
    "pairs": {"single_accelerator": [[1200, 1000], [900, 1000]]},
    "not_sampled": {"compiled autograd": 2},
    "discarded": {},
    "rate": 0.02,
    "warmup": 10,
    "max_pairs": 64,
    "washout": 1,
}
WRONG_PARTS = st.sampled_from(
    [None, 0, 1, 1.0, 1.5, -1, 2**63, True, "x", [], {}, [[1, 2]], [[0, 5]], [[5, 0]], [[1]]]
    + [[[1, 2, 3]], [[1.0, 2.0]], [[1.5, 2]], [[True, 1]], [[2**63, 1]], [["1", "2"]]]
    + [{"gpu": [[1, 2]]}, {"cpu_only": [[1, 2]]}, {"cpu_only": [[1, 0]]}, {"a": 1}, {"a": -1}]
    + [float("nan"), float("inf"), {"cpu_only": [[1, 2]] * 10001}, {"cpu_only": "x"}]
)


def mutated_threading_costs():
    """Valid schema 2.1 records whose threading_cost has parts deleted or
    replaced by plausible wrong values."""
    return st.builds(
        lambda changes, dropped, pair_changes: synthetic_record(
            schema="2.1",
            threading_cost=(
                {
                    **{k: v for k, v in THREADING_COST.items() if k not in dropped},
                    **changes,
                    "pairs": {**THREADING_COST["pairs"], **pair_changes},
                }
                if "pairs" not in dropped and "pairs" not in changes
                else {**{k: v for k, v in THREADING_COST.items() if k not in dropped}, **changes}
            ),
        ),
        st.dictionaries(
            st.sampled_from(sorted(THREADING_COST) + ["other"]), WRONG_PARTS, max_size=2
        ),
        st.sets(st.sampled_from(sorted(THREADING_COST)), max_size=2),
        st.dictionaries(
            st.sampled_from(
                ["cpu_only", "single_accelerator", "accelerator_cpu", "multi_accelerator", "gpu"]
            ),
            WRONG_PARTS,
            max_size=2,
        ),
    )


# Where the measured threads ran (schema 2.2) and plausible wrong values of
# its parts.
PLACEMENT = {
    "threads": {
        "calling": {"affinity": "0-3", "ran_on": "2"},
        "pt_autograd_0": {"affinity": "0-3,8", "ran_on": "1,3"},
    },
    "cpu_quota": 2.5,
    "intra_op_threads": 4,
}
WRONG_PLACEMENT_VALUES = (
    [None, 0, -1, -2, 0.0, 1.5, 2.0, True, "x", "", "0-3", "3-", "0,,1", "0-3\n", [], {}]
    + [{"calling": {"affinity": "0"}}, {"calling": {"affinity": "x", "ran_on": ""}}]
    + [{"calling": {"affinity": "0", "ran_on": 1}}, {"calling": "0"}, {"a": {}}]
    + [{"calling": {"affinity": "5-2", "ran_on": "", "other": 1}}, float("nan"), float("inf")]
)
WRONG_PLACEMENT_PARTS = st.sampled_from(WRONG_PLACEMENT_VALUES)


def mutated_placements():
    """Valid schema 2.2 records whose placement has parts deleted or replaced
    by plausible wrong values, or is wrong itself."""
    return st.builds(
        lambda changes, dropped, whole: synthetic_record(
            schema="2.2",
            threading_cost={
                **THREADING_COST,
                "placement": (
                    whole
                    if whole is not None
                    else {
                        **{k: v for k, v in PLACEMENT.items() if k not in dropped},
                        **changes,
                    }
                ),
            },
        ),
        st.dictionaries(
            st.sampled_from(sorted(PLACEMENT) + ["other"]), WRONG_PLACEMENT_PARTS, max_size=2
        ),
        st.sets(st.sampled_from(sorted(PLACEMENT)), max_size=1),
        st.one_of(st.none(), st.none(), st.none(), WRONG_PLACEMENT_PARTS),
    )


def load_package_module(name):
    """One module of the package, by its file, without running the package's
    __init__ (which would load the library into this process): its modules
    are imported under a bare package of the same folder."""
    if "adl_package" not in sys.modules:
        package = types.ModuleType("adl_package")
        package.__path__ = [os.path.join(PACKAGE_ROOT, "autograd_device_logging")]
        sys.modules["adl_package"] = package
    return importlib.import_module("adl_package." + name)


def schema_accepts(record):
    """Whether `record`, written as JSON, is valid under the schema. A record
    that holds NaN or an infinity cannot be written as JSON (Python's json
    writes them, JSON has no such values), so it is no record."""
    try:
        json.dumps(record, allow_nan=False)
    except ValueError:
        return False
    return jsonschema.Draft202012Validator(RECORD_SCHEMA).is_valid(record)


def read_both_ways(test, record):
    """`record` read by the exact checks and, as bytes, by the decoder's fast
    paths where msgspec is installed (Note [Two ways to read a record]) and
    where the compiled decoding is built (Note [A record's fields in compiled
    code]): the same Record from each, or Skip from each, and the compiled
    decoding gives the fields or leaves the record to the others. True when
    read."""
    fields = report.record_fields
    decoder = report.record_decoder
    results = []
    data = json.dumps(record).encode()
    for read in (decoder.decode_exactly, decoder.decode_typed, decoder.decode):
        try:
            r = read(data)
            results.append(tuple(getattr(r, name) for name in fields.Record.__slots__))
        except (fields.Skip, ValueError):
            results.append(None)
    test.assertEqual(results[0], results[1], record)
    test.assertEqual(results[0], results[2], record)
    if decoder.record_fields is not None:
        compiled = decoder.record_fields(data)
        if compiled is not None:
            test.assertEqual(tuple(compiled), results[0], record)
    return results[0] is not None


def generated_fleet(seed, jobs):
    """Records of a fleet: `jobs` jobs of 2 to 8 ranks on 1 or 2 hosts, each
    with a torchrun agent per host; some ranks restarted once (the same host
    and rank, a later process); some processes ran no backward pass; events
    drawn per process. No library is disabled."""
    import random

    rng = random.Random(seed)
    records, pid = [], 100
    for j in range(jobs):
        hosts = [f"node{j}-{h}" for h in range(rng.choice((1, 2)))]

        def process(host, **fields):
            nonlocal pid
            pid += 1
            return synthetic_record(
                job=f"j-{j}", job_source="torchrun", host=host, pid=pid, **fields
            )

        for host in hosts:
            records.append(process(host, role="agent", ran_backward=rng.random() < 0.5))
        for rank in range(rng.randint(2, 8)):
            host = hosts[rank % len(hosts)]
            for attempt in range(2 if rng.random() < 0.3 else 1):
                events = [e for e in (MULTIDEVICE, GPU_CPU) if rng.random() < 0.4]
                records.append(
                    process(
                        host,
                        start_time=f"2026-12-01T{9 + attempt:02d}:00:00Z",
                        role="rank",
                        rank=rank,
                        local_rank=rank,
                        world_size=8,
                        events=events,
                        ran_backward=rng.random() < 0.9,
                    )
                )
    return records


class TestFleetReportReader(TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")
        os.makedirs(self.dir)

    def write(self, *records, start=0):
        for i, record in enumerate(records, start):
            with open(os.path.join(self.dir, f"r{i}.json"), "w") as f:
                json.dump(record, f)

    def report(self, *args, python_args=(), env=None):
        return subprocess.run(
            [sys.executable, *python_args, "-m", "autograd_device_logging", "report", *args],
            env=env or child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def test_runs_offline(self):
        # A record from a real process, then the report: without site (so
        # without torch), with the dynamic linker listing what it loads, and
        # with the variables that would make a process write a record and
        # print statistics.
        require_built(self, LIBRARY)
        proc = subprocess.run(
            [sys.executable, "-c", "import autograd_device_logging, torch"],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        before = sorted(os.listdir(self.dir))
        env = dict(
            child_env(self.dir, AUTOGRAD_DEVICE_LOGGING_STATS="1", LD_DEBUG="files"),
            PYTHONPATH=PACKAGE_ROOT,
        )
        proc = self.report(self.dir, python_args=["-S"], env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        self.assertIn("(all jobs)", proc.stdout)
        loaded = [line for line in proc.stderr.splitlines() if "file=" in line]
        self.assertTrue(loaded, "LD_DEBUG=files listed nothing")
        for name in ("libautograd_device_logging", "libtorch", "libc10"):
            self.assertFalse([line for line in loaded if name in line], name)
        self.assertNotIn("autograd device stats", proc.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)), before)

    def test_console_script_runs_offline(self):
        script = os.path.join(self.tmp.name, "autograd-device-logging-report")
        with open(script, "w") as f:
            f.write(
                "import sys\n"
                "from autograd_device_logging.fleet_report import main\n"
                "print('LOADED' if sys.modules['autograd_device_logging']._activation.library() else 'OFFLINE')\n"
                "sys.exit(main())\n"
            )
        self.write(synthetic_record())
        proc = subprocess.run(
            [sys.executable, script, self.dir],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(proc.stdout.startswith("OFFLINE\n"), proc.stdout)

    def test_empty_directory_is_one_line_and_status_1(self):
        proc = self.report(self.dir)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn("no records to report in", proc.stderr)
        proc = self.report(os.path.join(self.dir, "missing"))
        self.assertEqual(proc.returncode, 2)
        self.assertIn("is not a directory", proc.stderr)

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(JSON | mutated_records())
    def test_any_json_is_read_or_skipped(self, value):
        # In-process over a directory of one file: never raises, and the
        # file is either counted (reported or left out) or skipped.
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        with open(os.path.join(self.dir, "r.json"), "w") as f:
            json.dump(value, f)
        result = report.fleet_report.summarize_directory(self.dir)
        report.report_text.format_table(result)
        json.dumps(result)
        counted = sum(
            s["processes"] + sum(s["left_out"].values())
            for job, s in result["jobs"].items()
            if job != report.fleet_totals.ALL_JOBS
        )
        self.assertEqual(counted + sum(result["skipped"].values()), 1)

    @hypothesis.settings(max_examples=100, deadline=None, database=None)
    @hypothesis.given(st.binary(max_size=64))
    def test_any_bytes_are_read_or_skipped(self, data):
        with open(os.path.join(self.dir, "r.json"), "wb") as f:
            f.write(data)
        result = report.fleet_report.summarize_directory(self.dir)
        self.assertEqual(sum(result["skipped"].values()) + len(result["jobs"]) // 2, 1)

    @hypothesis.settings(max_examples=1500, deadline=None, database=None)
    @hypothesis.given(mutated_records())
    def test_reader_accepts_exactly_what_the_schema_accepts(self, record):
        hypothesis.assume(record.get("schema") != 1 or isinstance(record.get("schema"), bool))
        self.assertEqual(read_both_ways(self, record), schema_accepts(record), record)

    @hypothesis.settings(max_examples=1000, deadline=None, database=None)
    @hypothesis.given(mutated_threading_costs())
    def test_reader_checks_the_threading_cost_as_the_schema_does(self, record):
        self.assertEqual(read_both_ways(self, record), schema_accepts(record), record)

    @hypothesis.given(mutated_placements())
    def test_reader_checks_the_placement_as_the_schema_does(self, record):
        self.assertEqual(read_both_ways(self, record), schema_accepts(record), record)

    def test_each_wrong_part_of_a_placement_is_read_as_the_schema_says(self):
        # Every wrong value in every part, and in every field of a thread:
        # what hypothesis samples above, exhaustively.
        wrong = WRONG_PLACEMENT_VALUES
        cases = [dict(PLACEMENT, **{part: value}) for part in PLACEMENT for value in wrong]
        for field in ("affinity", "ran_on"):
            for value in wrong:
                thread = dict(PLACEMENT["threads"]["calling"], **{field: value})
                cases.append(dict(PLACEMENT, threads={"calling": thread}))
        for placement in cases:
            record = synthetic_record(
                schema="2.2", threading_cost=dict(THREADING_COST, placement=placement)
            )
            self.assertEqual(read_both_ways(self, record), schema_accepts(record), placement)

    def test_placement_keys_group_processes_pinned_alike(self):
        key = report.record_fields.placement_key
        self.assertEqual(key(["5", "5"], None), "1 CPU")
        self.assertEqual(key(["0-3", "2-5,8"], None), "7 CPUs")
        self.assertEqual(key(["0-63"], 4.0), "64 CPUs, quota 4")
        self.assertEqual(key(["0-1000000000"], None), "1000000001 CPUs")  # no set built
        self.assertEqual(key([], 0.5), "0 CPUs, quota 0.5")

    def test_by_placement_splits_a_jobs_cost_by_where_its_threads_ran(self):
        def measured(pid, pairs, affinity):
            placement = dict(
                PLACEMENT,
                threads={"calling": {"affinity": affinity, "ran_on": affinity.split("-")[0]}},
            )
            return synthetic_record(
                pid=pid,
                job="a",
                schema="2.2",
                threading_cost=dict(
                    THREADING_COST, pairs={"single_accelerator": pairs}, placement=placement
                ),
            )

        self.write(
            measured(1, [[110, 100]], "5"),
            measured(2, [[130, 100]], "5"),
            measured(3, [[200, 100]], "0-15"),
            # 2.1: no placement.
            synthetic_record(pid=4, job="a", threading_cost=THREADING_COST),
        )
        plain = report.fleet_report.summarize_directory(self.dir)["jobs"]["a"]["threading_cost"]
        self.assertEqual(list(plain), ["single_accelerator"])
        self.assertEqual(plain["single_accelerator"]["units"], 4)
        split = report.fleet_report.summarize_directory(self.dir, by_placement=True)
        costs = split["jobs"]["a"]["threading_cost"]
        self.assertEqual(
            sorted(costs),
            [
                "single_accelerator [1 CPU, quota 2.5]",
                "single_accelerator [16 CPUs, quota 2.5]",
                "single_accelerator [placement unknown]",
            ],
        )
        pinned = costs["single_accelerator [1 CPU, quota 2.5]"]
        self.assertEqual((pinned["units"], pinned["median_percent"]), (2, 20.0))
        self.assertEqual(costs["single_accelerator [16 CPUs, quota 2.5]"]["median_percent"], 100.0)
        proc = self.report(self.dir, "--by-placement")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("single_accelerator [1 CPU, quota 2.5]", proc.stdout)

    def write_measured_jobs(self, *more):
        def cost(*pairs, device_class="single_accelerator"):
            return dict(THREADING_COST, pairs={device_class: [list(p) for p in pairs]})

        self.write(*more, start=100)
        self.write(
            # Job a: +20% and -10% in one process (+5%), +50% in another, and
            # a run of two ranks at +10% and +30% (one unit, +20%); one pair
            # of accelerator_cpu.
            synthetic_record(pid=1, job="a", threading_cost=cost((1200, 1000), (900, 1000))),
            synthetic_record(pid=2, job="a", threading_cost=cost((3000, 2000))),
            synthetic_record(pid=7, job="a", role="rank", rank=0, threading_cost=cost((110, 100))),
            synthetic_record(pid=8, job="a", role="rank", rank=1, threading_cost=cost((130, 100))),
            synthetic_record(
                pid=3, job="a", threading_cost=cost((110, 100), device_class="accelerator_cpu")
            ),
            # Job b: +100% in one process; job c measured nothing.
            synthetic_record(pid=4, job="b", threading_cost=cost((2000, 1000), (4000, 2000))),
            synthetic_record(pid=5, job="c", threading_cost=None),
            # Left out: a disabled library's pairs do not count.
            synthetic_record(pid=6, job="b", threading_cost=cost((1, 1000)), disabled_reason="x"),
        )

    def test_threading_cost_is_summarized_over_units_per_job_and_class(self):
        self.write_measured_jobs()
        jobs = report.fleet_report.summarize_directory(self.dir)["jobs"]
        # Units (Note [What an interval is over]): +5%, +50% and the run's +20%.
        a = jobs["a"]["threading_cost"]["single_accelerator"]
        self.assertEqual((a["pairs"], a["processes"], a["ranks"]), (5, 4, 2))
        self.assertEqual((a["units"], a["over"]), (3, "runs and processes"))
        self.assertAlmostEqual(a["median_percent"], 20.0)
        interval = a["interval"]
        self.assertEqual(len(interval["percent"]), 2)
        for got, want in zip(interval["percent"], [5.0, 50.0]):
            self.assertAlmostEqual(got, want)
        self.assertEqual((interval["level"], interval["meets_level"]), (0.75, False))
        self.assertEqual((interval["units"], interval["over"]), (3, "runs and processes"))
        one_pair = jobs["a"]["threading_cost"]["accelerator_cpu"]
        self.assertEqual((one_pair["pairs"], one_pair["units"]), (1, 1))
        self.assertIsNone(one_pair["interval"])
        # One process has no interval: its pairs are not independent runs.
        b = jobs["b"]["threading_cost"]["single_accelerator"]
        self.assertEqual((b["median_percent"], b["interval"], b["units"]), (100.0, None, 1))
        self.assertIsNone(jobs["c"]["threading_cost"])
        # All jobs: one vote per job, a's +20% and b's +100%.
        everything = jobs[report.fleet_totals.ALL_JOBS]["threading_cost"]["single_accelerator"]
        self.assertEqual((everything["pairs"], everything["processes"]), (7, 5))
        self.assertEqual((everything["units"], everything["over"]), (2, "jobs"))
        self.assertAlmostEqual(everything["median_percent"], 60.0)
        self.assertEqual(everything["interval"]["level"], 0.5)
        # The table: jobs ordered by the estimate, all jobs last; each
        # estimate with its units, each interval with its coverage.
        table = report.report_text.format_table(
            report.fleet_report.summarize_directory(self.dir), width=None
        )
        rows = [l for l in table.splitlines() if re.search(r" ms$", l)]
        self.assertEqual(
            [r.split()[:2] for r in rows],
            [
                ["b", "single_accelerator"],
                ["a", "single_accelerator"],
                ["a", "accelerator_cpu"],
                ["(all", "jobs)"],
                ["(all", "jobs)"],
            ],
        )
        self.assertRegex(rows[0], r"\+100\.0% +n/a +1 process ")
        self.assertRegex(
            rows[1],
            r"\+20\.0% +\[\+5\.0%, \+50\.0%\] 75% \(range\) +1 run \(2 rank processes\) \+ 2 processes",
        )
        self.assertRegex(rows[3], r"\+60\.0% +\[\+20\.0%, \+100\.0%\] 50% \(range\) +2 jobs")

    def test_nesting_and_sizes_are_skipped(self):
        with open(os.path.join(self.dir, "deep.json"), "w") as f:
            f.write("[" * 100000 + "]" * 100000)
        with open(os.path.join(self.dir, "big.json"), "w") as f:
            json.dump({**synthetic_record(), "program": "x" * (2 << 20)}, f)
        with open(os.path.join(self.dir, "digits.json"), "w") as f:
            f.write('{"schema": "2.0", "pid": ' + "9" * 5000 + "}")
        result = report.fleet_report.summarize_directory(self.dir)
        self.assertEqual(result["skipped"], {"too large": 1, "malformed: not JSON": 2})

    def test_denominator_is_processes_that_ran_backward(self):
        self.write(
            synthetic_record(pid=1, events=[GPU_CPU]),
            synthetic_record(pid=2),
            synthetic_record(pid=3, role="agent", ran_backward=False),
            synthetic_record(pid=4, ran_backward=False),
            synthetic_record(pid=5, disabled_reason="it was built for torch 2.12.0 ..."),
            # Rank 0 restarted: three records, one rank, both events.
            synthetic_record(pid=6, role="rank", rank=0, events=[MULTIDEVICE]),
            synthetic_record(pid=7, role="rank", rank=0, events=[GPU_CPU]),
            synthetic_record(pid=8, role="rank", rank=0, events=[]),
            synthetic_record(pid=9, role="rank", rank=1, events=[]),
            synthetic_record(pid=10, role="rank", rank=0, host="h2", events=[]),
        )
        job = report.fleet_report.summarize_directory(self.dir)["jobs"]["j"]
        self.assertEqual(job["processes"], 5)  # pids 1, 2; ranks (h, 0), (h, 1), (h2, 0)
        self.assertEqual(job["ranks"], 3)
        self.assertEqual(job["processes_with"], {"multidevice": 1, "gpu_cpu": 2})
        self.assertEqual(
            job["left_out"],
            {
                "disabled: it was built for torch 2.12.0 ...": 1,
                "no backward pass": 1,
                "torchrun agent": 1,
            },
        )
        table = report.report_text.format_table(
            report.fleet_report.summarize_directory(self.dir), width=None
        )
        self.assertRegex(
            table, r"\nj +5 +3 +1/5 \(20%\) +2/5 \(40%\) .* 1 agent, 1 no backward, 1 disabled"
        )
        self.assertIn("left out, 1 process disabled: it was built for torch 2.12.0", table)

    def test_first_format_records_still_count(self):
        first = {
            "schema": 1,
            "job": "old",
            "pid": 4,
            "host": "h",
            "rank": None,
            "events": [GPU_CPU],
            "pass_classes": None,
            "passes_classified": 1,
            "torch": {"built_for": "2.13.0", "running": "2.13.0"},
            "disabled_reason": None,
        }
        self.write(first)
        job = report.fleet_report.summarize_directory(self.dir)["jobs"]["old"]
        self.assertEqual((job["processes"], job["processes_with"]["gpu_cpu"]), (1, 1))

    def test_filters(self):
        self.write(
            synthetic_record(job="a", start_time="2026-11-01T00:00:00Z"),
            synthetic_record(job="a", pid=2, start_time="2026-11-15T12:00:00Z"),
            synthetic_record(job="b", start_time="2026-11-20T00:00:00Z"),
        )
        since = self.report(self.dir, "--json", "--since", "2026-11-10")
        self.assertEqual(since.returncode, 0, since.stderr)
        jobs = json.loads(since.stdout)["jobs"]
        self.assertEqual((jobs["a"]["processes"], jobs["b"]["processes"]), (1, 1))
        window = json.loads(
            self.report(
                self.dir, "--json", "--until", "2026-11-16T00:00:00+00:00", "--job", "a"
            ).stdout
        )
        self.assertEqual(set(window["jobs"]), {"a", "(all jobs)"})
        self.assertEqual((window["jobs"]["a"]["processes"], window["filtered"]), (2, 1))

    def test_a_newer_minor_with_values_this_reader_does_not_know_is_counted(self):
        # Note [A newer minor version adds fields and values]: each of the
        # schema's enumerated fields, with a value a later library may write.
        new = "a_value_from_the_future"
        for field in ("written_at", "job_source", "role", "events_logged_by"):
            with self.subTest(field=field):
                record = synthetic_record(schema="2.9", **{field: new})
                jsonschema.validate(record, RECORD_SCHEMA)
                self.assertTrue(read_both_ways(self, record))
                shutil.rmtree(self.dir)
                os.makedirs(self.dir)
                self.write(record)
                summary = report.fleet_report.summarize_directory(self.dir)
                self.assertEqual(summary["skipped"], {})
                # An unknown role counts as "other": a process, not a rank.
                self.assertEqual(summary["jobs"]["j"]["processes"], 1)
                self.assertEqual(summary["jobs"]["j"]["ranks"], 0)

    def test_an_unknown_event_and_class_are_kept_under_their_own_names(self):
        event, device_class = "torch.autograd.a_future_event", "a_future_class"
        records = [
            # A restarted rank raises the new event once: one process.
            synthetic_record(schema="2.9", role="rank", rank=0, pid=1, events=[event]),
            synthetic_record(schema="2.9", role="rank", rank=0, pid=2, events=[GPU_CPU]),
            synthetic_record(
                schema="2.9",
                pid=3,
                events=[event, MULTIDEVICE],
                pass_classes={c: 1 for c in report.record_fields.CLASSES} | {device_class: 5},
                threading_cost={
                    "pairs": {device_class: [[120, 100], [130, 100]]},
                    "not_sampled": {},
                    "discarded": {},
                },
            ),
            synthetic_record(job="k", pid=4, events=[GPU_CPU]),
        ]
        for record in records:
            jsonschema.validate(record, RECORD_SCHEMA)
        self.write(*records)
        summary = report.fleet_report.summarize_directory(self.dir)
        self.assertEqual(summary["skipped"], {})
        job, everything = summary["jobs"]["j"], summary["jobs"][report.fleet_totals.ALL_JOBS]
        self.assertEqual(job["processes"], 2)
        self.assertEqual(job["processes_with"], {"multidevice": 1, "gpu_cpu": 1, event: 2})
        self.assertEqual(everything["processes_with"], {"multidevice": 1, "gpu_cpu": 2, event: 2})
        self.assertEqual(job["passes_per_class"][device_class], 5)
        self.assertEqual(everything["passes_per_class"][device_class], 5)
        self.assertEqual(list(job["passes_per_class"])[:4], list(report.record_fields.CLASSES))
        self.assertEqual(job["threading_cost"][device_class]["pairs"], 2)
        table = report.report_text.format_table(summary)
        self.assertIn(f"event {event} (from a newer library): 2/3 processes", table)
        self.assertIn(f"class {device_class} (from a newer library): 5 passes", table)

    def test_the_schema_names_what_the_code_names(self):
        # The schema is the vocabulary: the events, classes and known values
        # the code uses are the ones it lists, in the same order.
        properties = RECORD_SCHEMA["properties"]
        events = properties["events"]["items"]["examples"]
        classes = properties["pass_classes"]["anyOf"][0]["required"]
        self.assertEqual(list(report.record_fields.EVENTS), events)
        self.assertEqual(list(report.record_fields.CLASSES), classes)
        cost = properties["threading_cost"]["anyOf"][1]["properties"]["pairs"]
        self.assertEqual(cost["propertyNames"]["examples"], classes)
        vocabulary = load_package_module("vocabulary")
        self.assertEqual(list(vocabulary.EVENT_BITS), events)
        measurement = load_package_module("threading_measurement")
        self.assertEqual(list(measurement.CLASSES), classes)
        # The checker of real records finds a value the schema does not list.
        self.assertEqual(
            known_values_outside_the_schema(synthetic_record(written_at="later")),
            ["written_at='later'"],
        )

    def duckdb_counts(self):
        """docs/fleet-report.sql over self.dir, as DuckDB runs it."""
        with open(os.path.join(os.path.dirname(TEST_DIR), "docs", "fleet-report.sql")) as f:
            query = f.read().replace("'records/*.json'", repr(os.path.join(self.dir, "*.json")))
        return duckdb.sql(query).fetchall()

    def report_counts(self):
        jobs = report.fleet_report.summarize_directory(self.dir)["jobs"]
        return [
            (j, s["processes"], s["processes_with"]["multidevice"], s["processes_with"]["gpu_cpu"])
            for j, s in sorted(jobs.items())
            if j != report.fleet_totals.ALL_JOBS
        ]

    def test_duckdb_counts_the_same_on_a_healthy_fleet(self):
        # The documented query over a generated fleet: several jobs of
        # ranks, restarted ranks, torchrun agents, processes without a
        # backward pass, and no disabled library anywhere (so that
        # disabled_reason is null in every record).
        records = generated_fleet(seed=3, jobs=6)
        self.assertFalse(any(r["disabled_reason"] for r in records))
        self.assertTrue(any(r["role"] == "agent" for r in records))
        self.write(*records)
        rows = self.duckdb_counts()
        self.assertEqual(rows, self.report_counts())
        self.assertEqual(len(rows), 6)
        self.assertTrue(all(processes > 0 for _, processes, _, _ in rows), rows)

    def test_duckdb_counts_the_same_beside_other_files_and_newer_minors(self):
        records = generated_fleet(seed=5, jobs=3)
        # A newer minor version adds fields, which neither reader needs.
        for record in records[::4]:
            record.update(schema="2.9", a_field_from_the_future={"x": [1, 2]})
        records.append(synthetic_record(job="j-0", pid=999, disabled_reason="why"))
        self.write(*records)
        for name, text in (
            ("notes.json", "not json at all"),
            ("array.json", "[1, 2]"),
            ("empty.json", ""),
            ("number.json", "42"),
            ("README.txt", "records live here"),
        ):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)
        self.assertEqual(self.duckdb_counts(), self.report_counts())

    def test_the_forest_plot_draws_each_jobs_estimate_interval_and_units(self):
        # Beside the jobs above, a job whose cpu_only passes measured 0 and
        # +2%: the negative control, drawn first.
        control = dict(THREADING_COST, pairs={"cpu_only": [[1000, 1000], [1020, 1000]]})
        # And job e: two processes at +10%, fewer units than a, a lower
        # estimate.
        e = dict(THREADING_COST, pairs={"single_accelerator": [[110, 100]]})
        self.write_measured_jobs(
            synthetic_record(pid=9, job="d", threading_cost=control),
            synthetic_record(pid=10, job="e", threading_cost=e),
            synthetic_record(pid=11, job="e", threading_cost=e),
        )
        summary = report.fleet_report.summarize_directory(self.dir)
        plot = report.report_plot
        self.assertEqual(
            plot._classes_measured(summary), ["cpu_only", "single_accelerator", "accelerator_cpu"]
        )
        rows, measured = plot.forest_rows(summary, "single_accelerator")
        self.assertEqual(measured, 3)
        # All jobs at the bottom, then by estimate: e's +10%, a's +20%, b's
        # +100%.
        self.assertEqual([r.job for r in rows], [report.fleet_totals.ALL_JOBS, "e", "a", "b"])
        self.assertEqual([round(r.percent, 6) for r in rows][1:], [10.0, 20.0, 100.0])
        everything, e, a, b = rows
        self.assertEqual(a.interval, (5.0, 50.0))
        self.assertFalse(a.meets_level)  # 3 units: their range, 75%
        self.assertEqual(a.label, "a (3 runs and processes, 75.0%)")
        self.assertIsNone(b.interval)  # one process: no interval
        self.assertEqual(b.label, "b (1 process)")
        self.assertEqual(everything.label, "(all jobs) (3 jobs, 75.0%)")
        # At most `top` jobs: those with most units.
        rows, measured = plot.forest_rows(summary, "single_accelerator", top=2)
        self.assertEqual(
            ([r.job for r in rows], measured), ([report.fleet_totals.ALL_JOBS, "e", "a"], 3)
        )
        (control_row,) = plot.forest_rows(summary, "cpu_only")[0][1:]
        self.assertEqual((control_row.job, control_row.percent), ("d", 1.0))
        png = os.path.join(self.tmp.name, "cost.png")
        proc = self.report(self.dir, "--plot", png)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(png, "rb") as f:
            header = f.read(24)
        self.assertEqual(header[:8], b"\x89PNG\r\n\x1a\n")
        # Taller than the figure without a forest (9 inches at 100 dpi).
        self.assertGreater(int.from_bytes(header[20:24], "big"), 900)

    def test_plot_of_ten_thousand_jobs(self):
        records = [
            synthetic_record(
                job=f"job-{i:05d}",
                pid=i,
                events=[GPU_CPU] if i % 3 == 0 else [],
                torch={"running": "2.13.0" if i % 2 else "2.15.0"},
                pass_classes=(
                    {
                        "cpu_only": i,
                        "single_accelerator": 10 * i,
                        "accelerator_cpu": i % 7,
                        "multi_accelerator": 1 if i % 97 == 0 else 0,
                    }
                    if i % 5
                    else None
                ),
            )
            for i in range(10000)
        ]
        self.write(*records)
        png = os.path.join(self.tmp.name, "fleet.png")
        proc = self.report(self.dir, "--plot", png)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(png, "rb") as f:
            header = f.read(24)
        self.assertEqual(header[:8], b"\x89PNG\r\n\x1a\n")
        width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
        self.assertLess(width * height, 4000 * 4000)

    def measured_fleet(self):
        """generated_fleet's records, every second one with measured pairs
        (whole-number floats in some, as the schema allows), beside files
        that are skipped."""
        records = generated_fleet(seed=11, jobs=12)
        for i, r in enumerate(records[::2]):
            pairs = [[1000 + 37 * ((i * 7 + j) % 11), 1000] for j in range(1 + i % 5)]
            if i % 3 == 0:
                pairs = [[float(off), float(on)] for off, on in pairs]
            r["threading_cost"] = dict(THREADING_COST, pairs={"single_accelerator": pairs})
        self.write(*records)
        with open(os.path.join(self.dir, "broken.json"), "w") as f:
            f.write("{")
        os.symlink(os.path.join(self.dir, "r0.json"), os.path.join(self.dir, "link.json"))
        return records

    def test_reading_processes_give_the_same_report(self):
        # Note [Reading a fleet in parallel]: the same report, to the byte,
        # whether one process reads or several do.
        self.measured_fleet()
        outputs = []
        for workers in ("1", "2", "5"):
            proc = self.report(self.dir, "--json", "--workers", workers)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            outputs.append(proc.stdout)
        self.assertEqual(outputs[0], outputs[1])
        self.assertEqual(outputs[0], outputs[2])
        result = json.loads(outputs[0])
        self.assertEqual(result["skipped"], {"symbolic link": 1, "malformed: not JSON": 1})
        self.assertIsNotNone(result["jobs"][report.fleet_totals.ALL_JOBS]["threading_cost"])
        self.assertEqual(self.report(self.dir, "--workers", "0").returncode, 2)

    def test_a_reading_process_that_dies_fails_the_report_without_waiting(self):
        self.measured_fleet()
        # Note [Each chunk is read by the first process to take it]: the
        # reading process takes the first chunk of names and dies with it,
        # as if killed; this one waits for it to take one, then reads the
        # rest.
        program = (
            "import os, sys, time\n"
            "from autograd_device_logging import fleet_report\n"
            "report = os.getpid()\n"
            "taking = fleet_report.TakenItems.__iter__\n"
            "def taken_by_a_dying_reader(self):\n"
            "    if os.getpid() != report:\n"
            "        for _ in taking(self):\n"
            "            os._exit(3)\n"
            "    deadline = time.monotonic() + 30\n"
            "    while self.taken.value == 0 and time.monotonic() < deadline:\n"
            "        time.sleep(0.01)\n"
            "    yield from taking(self)\n"
            "fleet_report.TakenItems.__iter__ = taken_by_a_dying_reader\n"
            "sys.exit(fleet_report.main(sys.argv[1:]))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", program, self.dir, "--workers", "2"],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertNotEqual(proc.returncode, 0)
        self.assertEqual(proc.returncode, 1)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn("a reading process ended with status 3", proc.stderr)
        self.assertEqual(proc.stdout, "")

    def test_progress_is_shown_on_a_terminal_and_only_there(self):
        import pty

        self.measured_fleet()
        proc = self.report(self.dir, "--workers", "2")
        self.assertEqual((proc.returncode, proc.stderr), (0, ""))
        # The same on a terminal: progress on stderr, the table on stdout;
        # with --json, nothing on the terminal.
        shown, proc = self.on_a_terminal()
        files = len([n for n in os.listdir(self.dir) if n.endswith(".json")])
        self.assertRegex(shown.decode(), rf"reading records: +100%.*{files}/{files}")
        self.assertIn("(all jobs)", proc.stdout.decode())
        shown, proc = self.on_a_terminal("--json")
        self.assertEqual(shown, b"")
        self.assertIn("(all jobs)", json.loads(proc.stdout)["jobs"])

    def on_a_terminal(self, *args):
        """(what stderr showed on a terminal, the finished process) of the
        report with `args`."""
        import pty

        leader, follower = pty.openpty()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "autograd_device_logging", "report", self.dir, *args],
                env=child_env(self.dir),
                stdout=subprocess.PIPE,
                stderr=follower,
                timeout=300,
            )
            os.close(follower)
            follower = None
            shown = b""
            while True:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the terminal's last writer is gone
                    break
                if not chunk:
                    break
                shown += chunk
        finally:
            os.close(leader)
            if follower is not None:
                os.close(follower)
        self.assertEqual(proc.returncode, 0)
        return shown, proc


# Note [The pairs' values in compiled code]: the pairs' JSON text, as the
# compiled reading takes it and as the Python path refuses or values it.
PLAIN_DURATIONS = st.integers(min_value=1, max_value=2**53) | st.sampled_from(
    [1, 2, 2**53 - 1, 2**53]
)
ANY_DURATIONS = (
    PLAIN_DURATIONS
    | st.integers(min_value=-3, max_value=0)
    | st.integers(min_value=2**53 + 1, max_value=2**64 + 3)
    | st.floats(min_value=1, max_value=1e12)
    | st.text(max_size=2)
    | st.none()
)
CLASS_NAMES = st.sampled_from(["single_accelerator", "multi_accelerator", "cpu_only"]) | st.text(
    max_size=4
)


def pairs_text(entries, ascii_only=True) -> bytes:
    """The JSON object of `entries` [(class, pairs)], a class named twice
    written twice."""
    return (
        "{"
        + ",".join(
            f"{json.dumps(name, ensure_ascii=ascii_only)}:{json.dumps(pairs)}"
            for name, pairs in entries
        )
        + "}"
    ).encode()


def as_bits(values):
    return None if values is None else {c: (a.hex(), b.hex(), n) for c, (a, b, n) in values.items()}


class TestCompiledPairsValues(TestCase):
    def setUp(self):
        super().setUp()
        self.values = report.record_decoder.pairs_values
        if self.values is None:
            self.skipTest(
                "the build has no _record_decoding (no simdjson where it was built: "
                "test_the_build_with_simdjson_has_the_compiled_reading says whether it should)"
            )

    @hypothesis.settings(max_examples=1000, deadline=None, database=None)
    @hypothesis.given(
        st.lists(
            st.tuples(
                CLASS_NAMES,
                st.lists(st.lists(PLAIN_DURATIONS, min_size=2, max_size=2), max_size=70),
            ),
            max_size=3,
            unique_by=lambda entry: entry[0],
        ),
        st.booleans(),
    )
    def test_plain_pairs_are_valued_in_compiled_code_to_the_bit(self, entries, ascii_only):
        text = pairs_text(entries, ascii_only)
        compiled = self.values(text, report.record_fields.MAX_PAIRS)
        self.assertIsNotNone(compiled, text)
        self.assertEqual(as_bits(compiled), as_bits(report.record_decoder.values_in_python(text)))

    def test_pairs_of_any_count_and_ties_are_valued_to_the_bit(self):
        # Note [The middle of a few values, without branches]: up to 128
        # pairs the medians are found without branches, above by
        # nth_element; equal values, sorted and reversed pairs included.
        rng = random.Random(7)
        for n in (1, 2, 3, 4, 63, 64, 65, 127, 128, 129, 130, 300, 1001):
            on = [rng.randrange(1, 10**9) for _ in range(n)]
            shapes = {
                "random": [[rng.randrange(1, 10**9), o] for o in on],
                "equal": [[5000, 4000]] * n,
                "two values": [[rng.choice((3, 9)), 2] for _ in range(n)],
                "sorted": sorted([[o + i, o] for i, o in enumerate(on)]),
            }
            shapes["reversed"] = shapes["sorted"][::-1]
            for shape, pairs in shapes.items():
                text = pairs_text([("single_accelerator", pairs)], True)
                compiled = self.values(text, report.record_fields.MAX_PAIRS)
                self.assertIsNotNone(compiled, (n, shape))
                self.assertEqual(
                    as_bits(compiled),
                    as_bits(report.record_decoder.values_in_python(text)),
                    (n, shape),
                )

    @hypothesis.settings(max_examples=1500, deadline=None, database=None)
    @hypothesis.given(
        st.lists(
            st.tuples(
                CLASS_NAMES,
                st.lists(st.lists(ANY_DURATIONS, min_size=1, max_size=3), max_size=6)
                # Counts the schema allows but a double does not hold.
                | st.lists(
                    st.lists(
                        st.integers(min_value=2**53 - 8, max_value=2**60), min_size=2, max_size=2
                    ),
                    min_size=1,
                    max_size=5,
                )
                | st.lists(ANY_DURATIONS, max_size=2)
                | ANY_DURATIONS,
            ),
            max_size=3,
        ),
        st.booleans(),
    )
    def test_any_other_pairs_are_left_to_python_or_valued_the_same(self, entries, ascii_only):
        text = pairs_text(entries, ascii_only)
        compiled = self.values(text, report.record_fields.MAX_PAIRS)
        in_python = report.record_decoder.values_in_python(text)
        if compiled is not None:
            self.assertEqual(as_bits(compiled), as_bits(in_python), text)
        if in_python is None:
            self.assertIsNone(compiled, text)

    def test_what_the_compiled_reading_leaves_to_python(self):
        max_pairs = report.record_fields.MAX_PAIRS
        for text in (
            b'{"a":[[1,2]],"a":[]}',  # a class named twice
            rb'{"a":[[1,2]],"\u0061":[[3,4]]}',  # the same, escaped
            b'{"a":[[9007199254740993,1]]}',  # above 2^53
            b'{"a":[[1.0,2]]}',
            b'{"a":[[0,2]]}',
            b'{"a":[[1,2,3]]}',
            b'{"a":[[1]]}',
            b'{"a":[1,2]}',
            b'{"a":{}}',
            b"[]",
            rb'{"\ud800":[[1,2]]}',
        ):
            self.assertIsNone(self.values(text, max_pairs), text)
        self.assertIsNotNone(self.values(b'{"a":[[1,2],[3,4],[5,6]]}', 3))
        self.assertIsNone(self.values(b'{"a":[[1,2],[3,4],[5,6],[7,8]]}', 3))
        self.assertEqual(self.values(b'{"a":[],"b":[[3,1]]}', 3), {"b": (200.0, 2.0, 1)})


class TestCompiledRecordFields(TestCase):
    """Note [A record's fields in compiled code]: the records the library
    writes are decoded in compiled code, to the same fields; anything else is
    left to msgspec's typed decoding and the exact checks."""

    def setUp(self):
        super().setUp()
        self.fields = report.record_decoder.record_fields
        if self.fields is None:
            self.skipTest(
                "the build has no _record_decoding (no simdjson where it was built: "
                "test_the_build_with_simdjson_has_the_compiled_reading says whether it should)"
            )

    def exactly(self, data):
        r = report.record_decoder.decode_exactly(data)
        return tuple(getattr(r, name) for name in report.record_fields.Record.__slots__)

    def test_the_strings_met_last_are_the_values_each_record_names(self):
        # Note [The strings met last are kept]: many values of one length
        # share the kept slots, and each record still reads as its own; an
        # equal value is one str.
        slots = report.record_fields.Record.__slots__
        job, host, role, torch = (slots.index(n) for n in ("job", "host", "role", "torch"))
        rng = random.Random(3)
        made = [
            synthetic_record(
                job=f"job-{j:03d}",
                host=f"h{j % 37:03d}",
                role=rng.choice(["rank", "other", "agent"]),
                rank=1,
                torch={"running": f"2.{j % 11}.0", "built_for": "2.9.0"},
            )
            for j in rng.choices(range(300), k=2000)
        ]
        decoded = [self.fields(json.dumps(r).encode()) for r in made]
        for record, fields in zip(made, decoded):
            self.assertEqual(
                (fields[job], fields[host], fields[role], fields[torch]),
                (record["job"], record["host"], record["role"], record["torch"]["running"]),
            )
        by_job = {}
        for fields in decoded:
            self.assertIs(by_job.setdefault(fields[job], fields[job]), fields[job])

    def test_the_records_the_library_writes_are_decoded_in_compiled_code(self):
        records = generated_fleet(seed=5, jobs=6)
        records += [
            synthetic_record(
                schema="2.2",
                role="rank",
                rank=3,
                events=[GPU_CPU, MULTIDEVICE],
                pass_classes={c: i for i, c in enumerate(report.record_fields.CLASSES)},
                parent={"pid": 7, "start_time": "2026-12-01T08:00:00Z"},
                threading_cost=dict(THREADING_COST, placement=PLACEMENT),
                calling_thread=True,
            ),
            synthetic_record(
                parent={"pid": 7, "start_time": None},
                threading_cost=dict(THREADING_COST, placement=dict(PLACEMENT, cpu_quota=None)),
            ),
            synthetic_record(threading_cost=None, disabled_reason="no torch", job="ü"),
            synthetic_record(threading_cost=dict(THREADING_COST, pairs={}), schema="2.123456789"),
        ]
        for record in records:
            data = json.dumps(record).encode()
            compiled = self.fields(data)
            self.assertIsNotNone(compiled, record)
            self.assertEqual(tuple(compiled), self.exactly(data), record)

    def test_what_it_leaves_to_the_other_decodings(self):
        plain = synthetic_record(
            schema="2.2",
            role="rank",
            rank=1,
            parent={"pid": 7, "start_time": "2026-12-01T08:00:00Z"},
            threading_cost=dict(THREADING_COST, placement=PLACEMENT),
        )
        text = json.dumps(plain)
        self.assertIsNotNone(self.fields(text.encode()))

        def but(**fields):
            return json.dumps({**plain, **fields})

        thread = {"affinity": "0", "ran_on": "0"}
        for left in (
            text.replace('"host": "h"', '"host": "h", "host": "g"'),  # a field twice
            text.replace('"running": "2.13.0"', '"running": "2.13.0", "running": "2.9.1"'),
            text.replace('"pid": 7', '"pid": 7, "pid": 8'),
            text.replace('"calling": {', '"calling": {}, "calling": {'),  # a thread twice
            but(schema="2.2\n"),  # what Python's `$` lets through
            but(start_time="2026-12-01T09:00:00Z\n"),
            but(events=["torch.autograd.newer_event"]),  # an event by name
            but(events=[GPU_CPU, GPU_CPU]),
            but(pass_classes={"cpu_only": 1}),  # a class missing
            but(pass_classes={**dict.fromkeys(report.record_fields.CLASSES, 1), "new": 1}),
            but(pid=1.0),  # a whole float where a count is
            but(pid=2**63),
            but(rank=-1),
            but(threading_cost=dict(THREADING_COST, pairs={"a": [[1.0, 2]]})),
            but(threading_cost=dict(THREADING_COST, rate=2**60)),
            but(threading_cost=dict(THREADING_COST, placement=dict(PLACEMENT, cpu_quota=2**60))),
            but(
                threading_cost=dict(
                    THREADING_COST, placement=dict(PLACEMENT, threads={"t": thread}, extra=1)
                )
            ).replace('"extra": 1', '"cpu_quota": 1'),
            but(schema="3.0"),
            but(job=""),
            "[]",
            "{",
        ):
            data = left.encode()
            self.assertIsNone(self.fields(data), left)
            # What the others make of it is theirs alone.
            try:
                expected = self.exactly(data)
            except (report.record_fields.Skip, ValueError):
                expected = None
            try:
                r = report.record_decoder.decode(data)
                got = tuple(getattr(r, n) for n in report.record_fields.Record.__slots__)
            except (report.record_fields.Skip, ValueError):
                got = None
            self.assertEqual(got, expected, left)


@functools.lru_cache(maxsize=None)
def _libc():
    """libc through ctypes, with mmap's, mincore's, mlock's and munmap's
    argument types (loaded once: held_in_memory maps hundreds of files)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


@contextlib.contextmanager
def _mapped(path):
    """The address and size of a read-only shared mapping of the file at
    `path` (not empty), unmapped after."""
    import ctypes
    import mmap

    libc = _libc()
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            yield address, size
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def resident(path) -> bool:
    """Whether the page cache holds any of the file at `path` (mincore on a
    mapping of it, which reads nothing)."""
    import ctypes
    import mmap

    with _mapped(path) as (address, size):
        vector = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
        if _libc().mincore(address, size, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return any(v & 1 for v in vector)


@contextlib.contextmanager
def held_in_memory(paths):
    """Holds the files `paths` in the page cache while the block runs
    (mlock on a mapping of each: read in, and not dropped meanwhile, as a
    kernel that pages out what is not used lately would); OSError where
    they cannot be held (a memory lock limit)."""
    import ctypes

    with contextlib.ExitStack() as stack:
        for path in paths:
            address, size = stack.enter_context(_mapped(path))
            if _libc().mlock(address, size) != 0:
                raise OSError(ctypes.get_errno(), f"mlock {path}")
        yield


class TestSharingTheWork(TestCase):
    """How the names to read are cut (record_reader.chunks_of) and how the
    processes share the work (Note [Each chunk is read by the first
    process to take it], fleet_report.py)."""

    @hypothesis.settings(max_examples=400, deadline=None)
    @hypothesis.given(
        st.lists(
            st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"/", b"x")),
            max_size=300,
        ),
        st.integers(min_value=1, max_value=400),
    )
    def test_chunks_hold_the_names_in_order_size_names_each(self, names, size):
        joined = b"".join(name + b"/" for name in names)
        expected = [
            b"".join(name + b"/" for name in names[i : i + size])
            for i in range(0, len(names), size)
        ]
        self.assertEqual(report.record_reader.chunks_of(joined, size), expected)

    def test_the_chunks_of_names_unlike_in_length_are_exact(self):
        # Short names then long ones: the guess from the mean length is off
        # by many names on both sides.
        names = [b"a"] * 2500 + [b"b" * 90] * 2500 + [b"c" * 7] * 1001
        joined = b"".join(name + b"/" for name in names)
        chunks = report.record_reader.chunks_of(joined, 1000)
        self.assertEqual([chunk.count(b"/") for chunk in chunks], [1000] * 6 + [1])
        self.assertEqual(b"".join(chunks), joined)

    def test_each_item_is_taken_once_and_a_slow_process_takes_fewer(self):
        import multiprocessing
        import time

        context = multiprocessing.get_context("fork")
        items = list(range(300))
        shared = report.fleet_report.TakenItems(list(items), context.Value("q", 0))
        theirs = context.SimpleQueue()

        def slow_process():
            mine = []
            for item in shared:
                mine.append(item)
                time.sleep(0.01)
            theirs.put(mine)

        process = context.Process(target=slow_process)
        process.start()
        mine = []
        for item in shared:
            mine.append(item)
            time.sleep(0.001)
        other = theirs.get()
        process.join(60)
        self.assertEqual(process.exitcode, 0)
        self.assertEqual(sorted(mine + other), items)
        self.assertEqual(len(set(mine) & set(other)), 0)
        self.assertGreater(len(mine), 2 * len(other), (len(mine), len(other)))
        # This process let go of every item, its own and the other's.
        self.assertEqual(shared.items, [None] * len(items))
        # Asked again, there is nothing left.
        self.assertEqual(list(shared), [])


class TestFilesNotInMemory(TestCase):
    """Note [A file not in memory is read later], record_file_reading.h: the
    files the page cache lost are read after the others, and read the
    same."""

    # kMostReadLater: files kept open to be read later.
    KEPT_OPEN = 256
    # Runs of a subtest, of which one must read enough files later.
    ATTEMPTS = 3

    def setUp(self):
        super().setUp()
        if report.record_decoder.keep_records is None or report.file_index.read_files is None:
            self.skipTest(
                "the build has no compiled reading (test_the_build_with_simdjson_has_the_"
                "compiled_reading says whether it should)"
            )
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "records")
        os.makedirs(self.dir)
        # Over four times as many files as are kept open to be read later
        # (kMostReadLater): more than that many are read later even where
        # most are read in place.
        self.job_of = {}
        for i, record in enumerate(generated_fleet(seed=11, jobs=150)):
            with open(os.path.join(self.dir, f"r{i}.json"), "w") as f:
                json.dump(record, f)
            self.job_of[f"r{i}.json"] = record["job"]
        self.names = sorted(os.listdir(self.dir))
        self.assertGreater(len(self.names), 4 * self.KEPT_OPEN)
        os.sync()

    def dropped(self, names, folder=None):
        """Drops the files `names` of `folder` (the records' by default) from
        the page cache: how many it no longer holds."""
        paths = [os.path.join(folder or self.dir, name) for name in names]
        for path in paths:
            with open(path, "rb") as f:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        gone = sum(not resident(path) for path in paths)
        if gone == 0:
            self.skipTest(
                f"{folder or self.dir}'s file system keeps every file in memory (tmpfs?): "
                "no file can be out of the page cache"
            )
        return gone

    def report_and_read_later(self, *args, descriptors=None):
        """The report's JSON, made here by one process (that may open at most
        `descriptors` files at once, where given); how many files it read
        later, without the cache and with it (_record_files' and
        _record_decoding's files_read_later()); and how many parts it asked
        the disk for ahead (parts_asked_for())."""
        code = (
            "import resource, sys\n"
            f"if {descriptors!r}:\n"
            f"    resource.setrlimit(resource.RLIMIT_NOFILE, ({descriptors!r}, {descriptors!r}))\n"
            "from autograd_device_logging import fleet_report\n"
            "from autograd_device_logging import _record_decoding, _record_files\n"
            "code = fleet_report.main(sys.argv[1:])\n"
            "sys.stdout.flush()\n"
            "print(_record_files.files_read_later(), _record_decoding.files_read_later(),"
            " _record_decoding.parts_asked_for(), file=sys.stderr)\n"
            "sys.exit(code)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, self.dir, "--json", "--workers", "1", *args],
            env=child_env(self.dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        counts = [int(n) for n in proc.stderr.strip().splitlines()[-1].split()]
        return proc.stdout, counts[:2], counts[2]

    def test_files_out_of_the_page_cache_are_read_later_and_read_the_same(self):
        # Files in memory are read as they come: held there, for a kernel
        # may page out files no one used lately while the report starts.
        paths = [os.path.join(self.dir, name) for name in self.names]
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(held_in_memory(paths))
            except OSError as e:
                self.skipTest(f"the files cannot be held in memory ({e}): any may be paged out")
            self.assertTrue(all(resident(path) for path in paths))
            expected, later, _ = self.report_and_read_later("--no-cache")
        self.assertEqual(later[0], 0)
        rng = random.Random(3)
        cache = os.path.join(self.tmp.name, "cache")
        # Some files, then every file (more than are kept open at once), for
        # the reading without the cache (read_files) and with it
        # (keep_records); every file again where fewer descriptors are left
        # than files kept open (a low `ulimit -n`).
        for share, descriptors in ((0.3, None), (1.0, None), (1.0, self.KEPT_OPEN // 4)):
            for args, counted in ((["--no-cache"], 0), (["--cache-dir", cache], 1)):
                with self.subTest(share=share, args=args, descriptors=descriptors):
                    # A good share of them: the first read of a file not in
                    # memory starts its reading, which the disk may finish
                    # before the kernel looks again (a virtual machine's
                    # host can complete the request while the guest still
                    # submits it, more often when the host is idle), and
                    # that file is read in place. How many varies from run
                    # to run with the host, so each run is read the same
                    # and the share is asked of one of ATTEMPTS runs.
                    seen = []
                    for _ in range(self.ATTEMPTS):
                        shutil.rmtree(cache, ignore_errors=True)
                        gone = self.dropped(rng.sample(self.names, int(len(self.names) * share)))
                        got, later, _ = self.report_and_read_later(*args, descriptors=descriptors)
                        self.assertEqual(got, expected)
                        self.assertLessEqual(later[counted], len(self.names))
                        self.assertEqual(later[1 - counted], 0)
                        seen.append((later[counted], gone))
                        # More than are kept open at once where every file
                        # was dropped.
                        least = max(gone // 4, self.KEPT_OPEN if share == 1.0 else 0)
                        if later[counted] > least:
                            break
                    else:
                        self.fail(f"(read later, dropped) of each run: {seen}")

    def test_parts_out_of_the_page_cache_are_asked_for_at_once(self):
        # Note [A run's parts not in memory are asked for at once],
        # record_decoding.cpp: a re-run that counts every job again, each
        # from the parts of its unchanged records, in logs the page cache
        # has dropped since.
        cache = os.path.join(self.tmp.name, "cache")
        self.report_and_read_later("--cache-dir", cache)
        first_of_each_job = {}
        for name in self.names:
            first_of_each_job.setdefault(self.job_of[name], name)
        for name in first_of_each_job.values():
            path = os.path.join(self.dir, name)
            os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
        expected = self.report_and_read_later("--no-cache")[0]
        os.sync()
        logs = [
            os.path.relpath(os.path.join(folder, name), cache)
            for folder, _, names in os.walk(cache)
            for name in names
            if name.startswith("parts-")
        ]
        self.assertTrue(logs)
        self.dropped(logs, folder=cache)
        got, _, asked_for = self.report_and_read_later("--cache-dir", cache)
        self.assertEqual(got, expected)
        # The unchanged records' parts: every record but one a job.
        self.assertGreater(asked_for, 0)
        self.assertLessEqual(asked_for, len(self.names) - len(first_of_each_job))


class TestCompiledPairsValuesAreBuilt(TestCase):
    def test_the_build_with_simdjson_has_the_compiled_reading(self):
        # A build that found simdjson ships the extension, and the report
        # uses it: TestCompiledPairsValues then runs rather than skips.
        if not built_with_simdjson():
            self.skipTest(f"{BUILD_DIR} was built without simdjson (apt install libsimdjson-dev)")
        decoder = report.record_decoder
        for name in ("pairs_values", "record_fields", "keep_records", "load_parts"):
            self.assertIsNotNone(getattr(decoder, name), name)


if __name__ == "__main__":
    run_tests()
