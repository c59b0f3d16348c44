"""Which jobs run multi-device or accelerator+CPU backward passes, and how often.

    python -m autograd_device_logging report DIR [--json] [--plot PNG]
        [--since WHEN] [--until WHEN] [--job NAME ...]
    autograd-device-logging-report DIR ...      (the same, as a console script)

DIR holds one record per process, written by the library when
AUTOGRAD_DEVICE_LOGGING_REPORT_DIR (or the launcher's --report) named it
(Note [The per-process record] in torch/csrc/autograd/process_record.h; the
format is schema/process_record.schema.json). The report runs offline: it
imports neither torch nor the library, writes nothing, and needs only Python
(numpy and scipy for the threading cost's intervals, n/a without them;
matplotlib for --plot).

A row per job and one for all jobs. Its denominator is the processes that ran
at least one backward pass; a rank that restarted counts once per (job, host,
rank), with the union of its events. Left out, and counted per job: torchrun
agents, processes that ran no backward pass, and processes in which the
library was disabled (with the reason). Files that are not readable records
(not UTF-8, not JSON, a field of the wrong type, a newer major schema) are
skipped and counted by reason; nothing in DIR makes the report fail.

Exit status: 0 when it reported, 1 when DIR holds no record it can count,
2 for a usage error (DIR is not a directory, a bad option).
"""

from __future__ import annotations

import argparse
import datetime
import errno
import json
import os
import re
import stat
import statistics
import sys
from collections import Counter, defaultdict
from typing import Dict, Iterator, List, Optional, Tuple

SCHEMA_MAJOR = 2
# The schema's pattern for the versions this reader reads
# (schema/process_record.schema.json).
READABLE_SCHEMA = re.compile(r"^2\.(0|[1-9][0-9]{0,8})$")
ANY_SCHEMA = re.compile(r"^([1-9][0-9]*)\.[0-9]+$")
START_TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
EVENTS = {
    "torch.autograd.multidevice_backward": "multidevice",
    "torch.autograd.gpu_cpu_backward": "gpu_cpu",
}
EVENT_BITS = {name: 1 << i for i, name in enumerate(EVENTS)}
SHORT_BITS = {EVENTS[name]: bit for name, bit in EVENT_BITS.items()}
CLASSES = ("cpu_only", "single_accelerator", "accelerator_cpu", "multi_accelerator")
ALL_JOBS = "(all jobs)"
MAX_COUNT = 2**63 - 1
# A record is about a kilobyte (a few more with the threading cost's pairs);
# anything far larger is not one.
MAX_RECORD_BYTES = 1 << 20


class Skip(Exception):
    """A file that is not a record this reader can count; args[0] says why."""


def _count(value, field: str) -> int:
    """JSON Schema's non-negative integer below 2^63: an int, or a float with
    no fractional part (json only makes exact types, so bool is no int here)."""
    kind = type(value)
    if kind is int:
        if 0 <= value <= MAX_COUNT:
            return value
    elif kind is float and value.is_integer() and 0 <= value <= MAX_COUNT:
        return int(value)
    raise Skip(f"bad field: {field}")


# Note [A newer minor version adds fields and values]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A record of a newer minor version may hold fields and enum values this
# reader does not know: a new event, device class, written_at, job_source,
# role or events_logged_by. Such a record is still evidence, so it is
# counted: an unknown event or class is kept under its own name (in
# processes_with, passes_per_class and threading_cost, after the known ones),
# an unknown role counts as "other", and the rest are not read. The schema
# says the same: its enums list the known values as examples of a string.
def _events(value) -> Tuple[int, Tuple[str, ...]]:
    """The known events as bits, and the unknown ones by name."""
    if type(value) is not list:
        raise Skip("bad field: events")
    bits = 0
    others: Tuple[str, ...] = ()
    for name in value:
        if type(name) is not str:
            raise Skip("bad field: events")
        bit = EVENT_BITS.get(name)
        if bit is None:
            if name in others:
                raise Skip("bad field: events")  # twice
            others += (name,)
        elif bits & bit:  # twice
            raise Skip("bad field: events")
        else:
            bits |= bit
    return bits, others


def _pass_classes(value) -> Tuple[Optional[Tuple[int, ...]], Optional[Dict[str, int]]]:
    """The known classes' counts in CLASSES order, and the unknown ones."""
    if value is None:
        return None, None
    if type(value) is not dict:
        raise Skip("bad field: pass_classes")
    try:
        known = tuple(_count(value[c], "pass_classes") for c in CLASSES)
    except KeyError:
        raise Skip("bad field: pass_classes") from None
    others = None
    if len(value) > len(CLASSES):
        others = {c: _count(n, "pass_classes") for c, n in value.items() if c not in CLASSES}
    return known, others


def _duration(value) -> int:
    kind = type(value)
    if (kind is int or (kind is float and value.is_integer())) and 1 <= value <= MAX_COUNT:
        return int(value)
    raise Skip("bad field: threading_cost")


def _counts(value) -> None:
    if type(value) is not dict:
        raise Skip("bad field: threading_cost")
    for n in value.values():
        _count(n, "threading_cost")


def _threading_cost(value) -> Optional[Dict[str, List[Tuple[int, int]]]]:
    """The measured pairs per class, or None (Note [Measuring the cost of
    single-threaded backward], threading_measurement.py), checked as the schema
    checks them."""
    if value is None or value is _MISSING:
        return None
    if type(value) is not dict:
        raise Skip("bad field: threading_cost")
    try:
        pairs, not_sampled, discarded = value["pairs"], value["not_sampled"], value["discarded"]
    except KeyError:
        raise Skip("bad field: threading_cost") from None
    _counts(not_sampled)
    _counts(discarded)
    rate = value.get("rate", 0)
    if type(rate) not in (int, float) or rate < 0 or rate > 1:
        raise Skip("bad field: threading_cost")
    for field in ("warmup", "max_pairs", "washout"):
        _count(value.get(field, 0), "threading_cost")
    if type(pairs) is not dict:
        raise Skip("bad field: threading_cost")
    out = {}
    for device_class, measured in pairs.items():
        if type(measured) is not list or len(measured) > 10000:
            raise Skip("bad field: threading_cost")
        rows = []
        for pair in measured:
            if type(pair) is not list or len(pair) != 2:
                raise Skip("bad field: threading_cost")
            rows.append((_duration(pair[0]), _duration(pair[1])))
        out[device_class] = rows
    return out


class Record:
    """What the report reads of one record."""

    __slots__ = (
        "threading_cost",
        "job",
        "host",
        "rank",
        "role",
        "start_time",
        "events",
        "other_events",
        "ran_backward",
        "pass_classes",
        "other_classes",
        "torch",
        "disabled_reason",
    )


_MISSING = object()


def parse_record(record) -> Record:
    """The record's fields the report uses, checked; raises Skip. Accepts
    exactly the records schema/process_record.schema.json accepts (major
    version 2, any minor version), and the first format's records
    (`"schema": 1`), whose missing fields it infers."""
    if type(record) is not dict:
        raise Skip("not a record")
    get = record.get
    schema = get("schema")
    if type(schema) is not str or not READABLE_SCHEMA.search(schema):
        if type(schema) is int and schema == 1:
            return _parse_first_format(record)
        newer = ANY_SCHEMA.search(schema) if type(schema) is str else None
        if newer and int(newer.group(1)) > SCHEMA_MAJOR:
            raise Skip("newer schema")
        raise Skip("bad field: schema")
    r = Record()
    # Required, and read by the report.
    r.host = host = get("host")
    r.job = job = get("job")
    start = get("start_time")
    if type(host) is not str:
        raise Skip("bad field: host")
    if type(job) is not str or not job:
        raise Skip("bad field: job")
    if type(start) is not str or not START_TIME.search(start):
        raise Skip("bad field: start_time")
    r.start_time = start[:19]
    r.role = role = get("role")
    if type(role) is not str:
        raise Skip("bad field: role")
    rank = get("rank", _MISSING)
    r.rank = None if rank is None else _count(None if rank is _MISSING else rank, "rank")
    torch = get("torch")
    if type(torch) is not dict or type(torch.get("running")) is not str:
        raise Skip("bad field: torch")
    if type(torch.get("built_for", "")) is not str:
        raise Skip("bad field: torch")
    r.torch = torch["running"]
    r.events, r.other_events = _events(get("events"))
    r.ran_backward = get("ran_backward")
    if type(r.ran_backward) is not bool:
        raise Skip("bad field: ran_backward")
    r.pass_classes, r.other_classes = _pass_classes(get("pass_classes", _MISSING))
    reason = get("disabled_reason", _MISSING)
    if reason is not None and type(reason) is not str:
        raise Skip("bad field: disabled_reason")
    r.disabled_reason = reason
    r.threading_cost = _threading_cost(get("threading_cost", _MISSING))
    # Required or constrained by the schema, though the report reads none of
    # them: the reader accepts exactly what the schema accepts.
    _count(get("pid"), "pid")
    _count(get("passes_classified"), "passes_classified")
    if type(get("program")) is not str:
        raise Skip("bad field: program")
    for field in ("job_source", "events_logged_by"):
        if type(get(field)) is not str:
            raise Skip(f"bad field: {field}")
    for field in ("time", "library_version", "activated_by", "written_at"):
        if type(get(field, "")) is not str:
            raise Skip(f"bad field: {field}")
    if type(get("accelerators", {})) is not dict:
        raise Skip("bad field: accelerators")
    return r


def _parse_first_format(record: dict) -> Record:
    """A record of the first format, before job_source, role, start_time and
    ran_backward: those are inferred."""
    r = Record()
    r.job = record.get("job")
    if type(r.job) is not str or not r.job:
        raise Skip("bad field: job")
    host = record.get("host")
    r.host = host if type(host) is str else "?"
    _count(record.get("pid"), "pid")
    rank = record.get("rank")
    r.rank = None if rank is None else _count(rank, "rank")
    r.role = "rank" if r.rank is not None else "other"
    r.start_time = None
    r.events, r.other_events = _events(record.get("events"))
    r.pass_classes, r.other_classes = _pass_classes(record.get("pass_classes"))
    torch = record.get("torch")
    running = torch.get("running") if type(torch) is dict else None
    r.torch = running if type(running) is str else "?"
    reason = record.get("disabled_reason")
    r.disabled_reason = reason if type(reason) is str else None
    r.threading_cost = None
    passes = record.get("passes_classified")
    r.ran_backward = bool(
        r.events or (type(passes) is int and passes > 0) or sum(r.pass_classes or ())
    )
    return r


def read_records(directory: str, skipped: Counter) -> Iterator[Record]:
    """The records of `directory`, one at a time; what is not one is counted
    in `skipped` by reason.

    The directory is shared (any user may add entries), so nothing in it is
    followed or waited on: a symbolic link is skipped, and so is anything
    that is not a regular file (a FIFO, whose open() would block until a
    writer came, a socket, a device, a directory). The open() does not follow
    links and does not block, and the file is checked again once open, in
    case the entry was replaced after it was listed."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                if entry.is_symlink():
                    raise Skip("symbolic link")
                if not entry.is_file(follow_symlinks=False):
                    raise Skip("not a regular file")
                try:
                    fd = os.open(entry.path, flags)
                except OSError as e:
                    if e.errno == errno.ELOOP:
                        raise Skip("symbolic link")
                    raise
                try:
                    info = os.fstat(fd)
                    if not stat.S_ISREG(info.st_mode):
                        raise Skip("not a regular file")
                    if info.st_size > MAX_RECORD_BYTES:
                        raise Skip("too large")
                    data = os.read(fd, info.st_size + 1)
                finally:
                    os.close(fd)
                yield parse_record(json.loads(data.decode("utf-8")))
            except Skip as e:
                skipped[e.args[0]] += 1
            except (OSError, ValueError, RecursionError):
                # Not a readable file, not UTF-8, not JSON, or nested too deep.
                skipped["unreadable"] += 1


# Torch releases by number, so that a rank's state is one small int.
_RELEASES: Dict[str, int] = {}
_RELEASE_NAMES: List[str] = []
_EVENT_MASK = (1 << len(EVENTS)) - 1


def _release_number(release: str) -> int:
    number = _RELEASES.get(release)
    if number is None:
        number = _RELEASES[release] = len(_RELEASE_NAMES)
        _RELEASE_NAMES.append(release)
    return number


class JobTotals:
    """One job's counts, kept as the records stream by."""

    __slots__ = (
        "ranks",
        "others",
        "others_with",
        "passes",
        "counting",
        "torch",
        "left_out",
        "costs",
        "others_by_name",
    )

    def __init__(self):
        # "host\0rank" -> events | release number << 2: a restarted rank
        # counts once, with the union of its events and its last release.
        # One short string and one small int per rank keep a million ranks
        # in well under the report's memory target.
        self.ranks: Dict[str, int] = {}
        self.others = 0
        self.others_with = [0, 0]
        self.passes = [0, 0, 0, 0]
        self.counting = 0
        self.torch: Counter = Counter()
        self.left_out: Counter = Counter()
        # class -> measured (off_ns, on_ns) pairs, pooled over processes;
        # class -> processes that measured it.
        # class -> what the processes that measured it found.
        self.costs: Dict[str, MeasuredClass] = {}
        # What only records of a newer minor version hold (Note [A newer
        # minor version adds fields and values]), made when first needed:
        # {"rank events": {rank key: {event}}, "events": Counter of the other
        # processes' events, "passes": Counter of passes per class}.
        self.others_by_name: Optional[dict] = None

    def _by_name(self) -> dict:
        if self.others_by_name is None:
            self.others_by_name = {"rank events": {}, "events": Counter(), "passes": Counter()}
        return self.others_by_name

    def add_costs(self, costs: Dict[str, List[Tuple[int, int]]]) -> None:
        for device_class, pairs in costs.items():
            if pairs:
                self.costs.setdefault(device_class, MeasuredClass()).add(pairs)

    def add(self, r: Record) -> bool:
        """Counts `r`; True when it is a process other than a rank."""
        if r.role == "agent":
            self.left_out["torchrun agent"] += 1
            return False
        if r.disabled_reason:
            self.left_out["disabled: " + r.disabled_reason] += 1
            return False
        if not r.ran_backward:
            self.left_out["no backward pass"] += 1
            return False
        if r.threading_cost:
            self.add_costs(r.threading_cost)
        if r.pass_classes is not None:
            self.counting += 1
            passes = self.passes
            for i, n in enumerate(r.pass_classes):
                passes[i] += n
            if r.other_classes:
                self._by_name()["passes"].update(r.other_classes)
        if r.role == "rank" and r.rank is not None:
            key = f"{r.host}\0{r.rank}"
            state = self.ranks.get(key, 0)
            self.ranks[key] = (state & _EVENT_MASK | r.events) | _release_number(r.torch) << 2
            if r.other_events:
                self._by_name()["rank events"].setdefault(key, set()).update(r.other_events)
            return False
        self.others += 1
        if r.other_events:
            self._by_name()["events"].update(r.other_events)
        for i, bit in enumerate(EVENT_BITS.values()):
            self.others_with[i] += bool(r.events & bit)
        self.torch[r.torch] += 1
        return True

    def ranks_by_release(self) -> Dict[str, List[int]]:
        """{torch release: [ranks, with multidevice, with gpu_cpu]}, each
        rank under the release of its last record."""
        out: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0])
        for state in self.ranks.values():
            row = out[_RELEASE_NAMES[state >> 2]]
            row[0] += 1
            for i, bit in enumerate(EVENT_BITS.values()):
                row[1 + i] += bool(state & bit)
        return out

    def summary(self) -> dict:
        processes = self.others + len(self.ranks)
        with_event = list(self.others_with)
        torch = Counter(self.torch)
        for state in self.ranks.values():
            torch[_RELEASE_NAMES[state >> 2]] += 1
            for i, bit in enumerate(EVENT_BITS.values()):
                with_event[i] += bool(state & bit)
        processes_with = dict(zip(EVENTS.values(), with_event))
        passes = dict(zip(CLASSES, self.passes)) if self.counting else None
        if self.others_by_name is not None:
            by_name = self.others_by_name
            events = Counter(by_name["events"])
            for names in by_name["rank events"].values():
                events.update(names)
            processes_with.update(sorted(events.items()))
            if passes is not None:
                passes.update(sorted(by_name["passes"].items()))
        return {
            "processes": processes,
            "ranks": len(self.ranks),
            "processes_with": processes_with,
            "passes_per_class": passes,
            "processes_counting_passes": self.counting,
            "torch": sorted(torch),
            "left_out": dict(sorted(self.left_out.items())),
            "threading_cost": _summaries_of(self.costs),
        }


def _bootstrap_interval(values: List[float]) -> Optional[List[float]]:
    """The 95% bootstrap interval of the median of `values` (scipy's
    bootstrap, percentile method, seeded so that a report is reproducible);
    None for fewer than two values or without scipy."""
    if len(values) < 2:
        return None
    try:
        import numpy as np
        from scipy import stats
    except ImportError:
        return None
    import warnings

    with warnings.catch_warnings():
        # All values equal is a valid answer ([x, x]), not a problem to report.
        warnings.simplefilter("ignore")
        result = stats.bootstrap(
            (np.asarray(values, dtype=float),),
            np.median,
            confidence_level=0.95,
            n_resamples=1000,
            method="percentile",
            random_state=np.random.default_rng(0),
        )
    low, high = (float(v) for v in result.confidence_interval)
    return [low, high] if low == low and high == high else None


class MeasuredClass:
    """What the processes of a job found for one device class.

    Note [One process, one vote]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    A process's own state (the cores it runs on, the GPU's clocks, its
    allocator) moves all of its passes together: the same program measured in
    two processes can differ by more than either process's own interval
    (docs/threading-cost.md says how that was found). So the processes, not the
    pairs, are the independent samples: each process gives the median of its
    pairs' (off - on) / on, a job's estimate is the median over its
    processes, and its 95% interval is a bootstrap over them. A job of one
    process has only its pairs to resample: its interval is over pairs and
    says nothing of other runs, and the report marks it so."""

    __slots__ = ("medians", "differences", "pairs", "only_percents")

    def __init__(self):
        self.medians: List[float] = []
        self.differences: List[float] = []
        self.pairs = 0
        # The per-pair percentages while one process measured the class.
        self.only_percents: Optional[List[float]] = None

    def add(self, pairs: List[Tuple[int, int]]) -> None:
        percent = [100.0 * (off - on) / on for off, on in pairs]
        self.medians.append(statistics.median(percent))
        self.differences.append(statistics.median(off - on for off, on in pairs))
        self.pairs += len(pairs)
        self.only_percents = percent if len(self.medians) == 1 else None

    def merge(self, other: "MeasuredClass") -> None:
        one = not self.medians and len(other.medians) == 1
        self.only_percents = other.only_percents if one else None
        self.medians += other.medians
        self.differences += other.differences
        self.pairs += other.pairs

    def summary(self) -> dict:
        one = len(self.medians) == 1
        return {
            "pairs": self.pairs,
            "processes": len(self.medians),
            "median_percent": statistics.median(self.medians),
            "interval_percent": _bootstrap_interval(self.only_percents if one else self.medians),
            "interval_over": "pairs" if one else "processes",
            "median_difference_ms": statistics.median(self.differences) / 1e6,
        }


def _summaries_of(costs: Dict[str, MeasuredClass]) -> Optional[dict]:
    known = [c for c in CLASSES if c in costs]
    out = {c: costs[c].summary() for c in known + sorted(set(costs) - set(known))}
    return out or None


def threading_cost_summary(per_process: Dict[str, List[List[Tuple[int, int]]]]) -> Optional[dict]:
    """Per class, from each process's (off_ns, on_ns) pairs: the pairs, the
    processes, the estimate (the median over processes of each one's median
    (off - on) / on, in percent) with its 95% bootstrap interval, and the
    median of off - on in ms (Note [One process, one vote]); None when
    nothing was measured."""
    costs: Dict[str, MeasuredClass] = {}
    for device_class, processes in per_process.items():
        for pairs in processes:
            if pairs:
                costs.setdefault(device_class, MeasuredClass()).add(pairs)
    return _summaries_of(costs)


def _when(text: str) -> str:
    """A --since/--until value as the records write times: UTC, seconds."""
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value.strftime("%Y-%m-%dT%H:%M:%S")


def summarize_directory(
    directory: str,
    since: Optional[str] = None,
    until: Optional[str] = None,
    jobs: Optional[List[str]] = None,
) -> dict:
    """The report of `directory`: {"jobs": {job: summary}, "releases":
    {torch: counts}, "skipped": {reason: n}, "filtered": n}. Streams: memory
    grows with the jobs and ranks, not with the records."""
    skipped: Counter = Counter()
    totals: Dict[str, JobTotals] = defaultdict(JobTotals)
    # Per torch release, the processes that are not ranks (ranks are kept
    # with their job, restarts folded): [processes, multidevice, gpu_cpu].
    other_releases: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0])
    wanted = set(jobs) if jobs else None
    filtered = 0
    for r in read_records(directory, skipped):
        if (wanted is not None and r.job not in wanted) or (
            (since or until)
            and (
                r.start_time is None
                or (since is not None and r.start_time < since)
                or (until is not None and r.start_time > until)
            )
        ):
            filtered += 1
            continue
        if totals[r.job].add(r):
            row = other_releases[r.torch]
            row[0] += 1
            for i, bit in enumerate(EVENT_BITS.values()):
                row[1 + i] += bool(r.events & bit)
    summaries = {job: t.summary() for job, t in totals.items()}
    releases: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0])
    for t in totals.values():
        for release, row in t.ranks_by_release().items():
            releases[release] = [a + b for a, b in zip(releases[release], row)]
    for release, row in other_releases.items():
        releases[release] = [a + b for a, b in zip(releases[release], row)]
    if summaries:
        summaries[ALL_JOBS] = _sum_of(list(summaries.values()))
        everything: Dict[str, MeasuredClass] = {}
        for t in totals.values():
            for device_class, measured in t.costs.items():
                everything.setdefault(device_class, MeasuredClass()).merge(measured)
        summaries[ALL_JOBS]["threading_cost"] = _summaries_of(everything)
    return {
        "jobs": summaries,
        "releases": {
            release: {"processes": row[0], "processes_with": dict(zip(EVENTS.values(), row[1:]))}
            for release, row in sorted(releases.items())
        },
        "skipped": dict(sorted(skipped.items())),
        "filtered": filtered,
    }


def _sum_of(summaries: List[dict]) -> dict:
    counting = sum(s["processes_counting_passes"] for s in summaries)
    left_out: Counter = Counter()
    for s in summaries:
        left_out.update(s["left_out"])
    return {
        "processes": sum(s["processes"] for s in summaries),
        "ranks": sum(s["ranks"] for s in summaries),
        "processes_with": _summed(s["processes_with"] for s in summaries),
        "passes_per_class": (
            _summed(s["passes_per_class"] or dict.fromkeys(CLASSES, 0) for s in summaries)
            if counting
            else None
        ),
        "processes_counting_passes": counting,
        "torch": sorted({t for s in summaries for t in s["torch"]}),
        "left_out": dict(sorted(left_out.items())),
    }


def _summed(counts) -> Dict[str, int]:
    """The sum of dicts of counts, in the order their keys first appear (the
    known names first, as each dict has them first)."""
    out: Dict[str, int] = {}
    for one in counts:
        for name, n in one.items():
            out[name] = out.get(name, 0) + n
    return out


def _left_out_text(left_out: Dict[str, int]) -> str:
    agents = left_out.get("torchrun agent", 0)
    idle = left_out.get("no backward pass", 0)
    disabled = sum(n for k, n in left_out.items() if k.startswith("disabled: "))
    parts = []
    if agents:
        parts.append(f"{agents} agent{'s' if agents != 1 else ''}")
    if idle:
        parts.append(f"{idle} no backward")
    if disabled:
        parts.append(f"{disabled} disabled")
    return ", ".join(parts) or "-"


def _aligned(rows: List[List[str]]) -> List[str]:
    """The rows as text, each column padded to its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def format_table(report: dict) -> str:
    summary, skipped = report["jobs"], report["skipped"]
    header = ["job", "processes", "ranks", "multidevice", "gpu_cpu", *CLASSES, "torch", "left out"]
    body = []
    for job in sorted(summary, key=lambda j: (j == ALL_JOBS, j)):
        s = summary[job]
        n = s["processes"]
        shares = [
            (
                f"{s['processes_with'][e]}/{n} ({100.0 * s['processes_with'][e] / n:.0f}%)"
                if n
                else "-"
            )
            for e in ("multidevice", "gpu_cpu")
        ]
        passes = s["passes_per_class"]
        body.append(
            [
                job,
                str(n),
                str(s["ranks"]),
                *shares,
                *(str(passes[c]) if passes else "-" for c in CLASSES),
                ", ".join(s["torch"]) or "-",
                _left_out_text(s["left_out"]),
            ]
        )
    lines = _aligned([header, *body])
    lines.append("")
    lines.append(
        "processes: those that ran a backward pass (a restarted rank once); multidevice / "
        "gpu_cpu: those whose passes raised the event; passes per class: summed over "
        "processes that ran with AUTOGRAD_DEVICE_LOGGING_STATS=1 ('-': none did)"
    )
    reasons = Counter()
    for s in summary.values() if ALL_JOBS not in summary else [summary[ALL_JOBS]]:
        reasons.update({k: v for k, v in s["left_out"].items() if k.startswith("disabled: ")})
    for reason, count in sorted(reasons.items()):
        lines.append(f"left out, {count} process{'es' if count != 1 else ''} {reason}")
    lines += _newer_names_text(summary)
    cost = format_threading_cost(summary)
    if cost:
        lines += ["", cost]
    if report.get("filtered"):
        lines.append(f"{report['filtered']} records outside --since/--until/--job")
    for reason, count in skipped.items():
        lines.append(f"{count} record{'s' if count != 1 else ''} skipped: {reason}")
    return "\n".join(lines)


def _newer_names_text(summary: dict) -> List[str]:
    """A line per event and class that only records of a newer minor version
    name (Note [A newer minor version adds fields and values]), over all
    jobs."""
    whole = summary.get(ALL_JOBS) or next(iter(summary.values()), None)
    if whole is None:
        return []
    n = whole["processes"]
    lines = [
        f"event {name} (from a newer library): {count}/{n} processes"
        for name, count in whole["processes_with"].items()
        if name not in EVENTS.values()
    ]
    lines += [
        f"class {name} (from a newer library): {count} passes"
        for name, count in (whole["passes_per_class"] or {}).items()
        if name not in CLASSES
    ]
    return lines


def _signed(value: float) -> str:
    return f"{value:+.1f}%"


def format_threading_cost(summary: dict) -> str:
    """The measured cost of single-threaded backward: a row per job and
    class, the largest estimate first, then each class over all jobs; empty
    when no job measured it."""
    rows = [
        (job, device_class, cost)
        for job, s in summary.items()
        for device_class, cost in (s.get("threading_cost") or {}).items()
    ]
    if not rows:
        return ""
    rows.sort(key=lambda row: (row[0] == ALL_JOBS, -row[2]["median_percent"], row[0], row[1]))
    header = ["job", "class", "single-threaded backward", "95% interval", "off - on", "processes"]
    body = []
    for job, device_class, cost in rows:
        interval = cost["interval_percent"]
        body.append(
            [
                job,
                device_class,
                f"{_signed(cost['median_percent'])} ({cost['pairs']} "
                f"pair{'s' if cost['pairs'] != 1 else ''})",
                (
                    f"[{_signed(interval[0])}, {_signed(interval[1])}]"
                    + ("*" if cost["interval_over"] == "pairs" else "")
                    if interval
                    else "n/a"
                ),
                f"{cost['median_difference_ms']:+.3f} ms",
                str(cost["processes"]),
            ]
        )
    lines = _aligned([header, *body])
    lines.append("")
    lines.append(
        "single-threaded backward: per process, the median over its measured pairs of "
        "passes (one with multithreading off, one on; AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING=1) "
        "of (off - on) / on, then the median over the job's processes; positive: slower "
        "single-threaded. 95% interval: a bootstrap over the processes (scipy; n/a for one pair "
        "or without scipy); *: one process, whose interval is over its own pairs and says "
        "nothing of other runs"
    )
    return "\n".join(lines)


def plot(report: dict, path: str, top: int = 30) -> None:
    """The share of backward-running processes with each event, per torch
    release and overall; then passes per class for the `top` jobs with the
    most passes (the rest summed), on a log axis. Jobs without statistics are
    not drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    releases = dict(report["releases"])
    everything = report["jobs"].get(ALL_JOBS)
    groups = list(releases.items())
    if everything is not None:
        groups.append(("all", everything))
    jobs = [
        (job, s["passes_per_class"])
        for job, s in report["jobs"].items()
        if job != ALL_JOBS and s["passes_per_class"]
    ]
    jobs.sort(key=lambda item: (-sum(item[1].values()), item[0]))
    if len(jobs) > top:
        rest = jobs[top:]
        summed = {c: sum(p[c] for _, p in rest) for c in CLASSES}
        jobs = jobs[:top] + [(f"{len(rest)} other jobs", summed)]
    fig, (shares, passes) = plt.subplots(
        2, 1, figsize=(max(8.0, 0.5 * len(jobs) + 4), 9), gridspec_kw={"height_ratios": [2, 3]}
    )
    width = 0.38
    for i, event in enumerate(("multidevice", "gpu_cpu")):
        values = [
            100.0 * g["processes_with"][event] / g["processes"] if g["processes"] else 0.0
            for _, g in groups
        ]
        bars = shares.bar([x + (i - 0.5) * width for x in range(len(groups))], values, width)
        bars.set_label(event)
    shares.set_xticks(range(len(groups)))
    shares.set_xticklabels(
        [
            f"{'all releases' if i == len(releases) else 'torch ' + name}\n"
            f"({g['processes']} processes)"
            for i, (name, g) in enumerate(groups)
        ]
    )
    shares.set_ylabel("% of processes that ran backward")
    shares.set_ylim(0, 100)
    shares.set_title("Processes whose backward passes raised each event")
    shares.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if jobs:
        width = 0.8 / len(CLASSES)
        for i, c in enumerate(CLASSES):
            xs = [x + (i - 1.5) * width for x in range(len(jobs))]
            passes.bar(xs, [max(p[c], 0) for _, p in jobs], width, label=c)
        passes.set_yscale("symlog", linthresh=1)
        passes.set_xticks(range(len(jobs)))
        passes.set_xticklabels([j[:32] for j, _ in jobs], rotation=30, ha="right")
        passes.legend(title="pass class", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        passes.set_title(f"Backward passes per class, the {min(len(jobs), top)} jobs with most")
    else:
        passes.text(0.5, 0.5, "no job ran with AUTOGRAD_DEVICE_LOGGING_STATS=1", ha="center")
        passes.set_axis_off()
    passes.set_ylabel("backward passes (log)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def make_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", metavar="DIR", help="the directory of records")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--plot", metavar="PNG", help="also draw the shares and the passes per class (matplotlib)"
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        type=_when,
        help="only processes started at or after WHEN (ISO 8601)",
    )
    parser.add_argument(
        "--until", metavar="WHEN", type=_when, help="only processes started at or before WHEN"
    )
    parser.add_argument("--job", metavar="NAME", action="append", help="only this job (repeatable)")
    return parser


def main(argv=None, prog=None) -> int:
    parser = make_parser(prog)
    args = parser.parse_args(argv)
    if not os.path.isdir(args.directory):
        print(f"{parser.prog}: {args.directory!r} is not a directory", file=sys.stderr)
        return 2
    report = summarize_directory(args.directory, args.since, args.until, args.job)
    if not report["jobs"]:
        skipped = sum(report["skipped"].values()) + report["filtered"]
        print(
            f"{parser.prog}: no records to report in {args.directory}"
            + (f" ({skipped} files skipped or filtered out)" if skipped else ""),
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_table(report))
    if args.plot:
        try:
            plot(report, args.plot)
        except ImportError:
            print(
                f"{parser.prog}: --plot needs matplotlib: pip install matplotlib", file=sys.stderr
            )
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
