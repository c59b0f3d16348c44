"""A record's fields, checked as schema/process_record.schema.json checks them.

The format is the schema's (Note [The per-process record] in
torch/csrc/autograd/process_record.h). Of each record this keeps only what the
report counts, and of the measured pairs only each class's value
(cost_statistics.process_value), never the pairs.
"""

from __future__ import annotations

import collections
import re
from typing import Dict, Optional, Sequence, Tuple

from . import vocabulary
from .cost_statistics import process_value

SCHEMA_MAJOR = 2
# The schema's pattern for the versions this reader reads.
READABLE_SCHEMA = re.compile(r"^2\.(0|[1-9][0-9]{0,8})$")
ANY_SCHEMA = re.compile(r"^([1-9][0-9]*)\.[0-9]+$")
START_TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
# The schema's CPU list ("0-3,8").
CPU_LIST = re.compile(r"^([0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)?$")
# The schema's known events and classes (test/test_fleet_report_reader.py
# holds them to it), with their short names in the report.
EVENTS = {
    vocabulary.MULTIDEVICE_BACKWARD: "multidevice",
    vocabulary.GPU_CPU_BACKWARD: "gpu_cpu",
}
EVENT_BITS = vocabulary.EVENT_BITS
EVENT_MASK = (1 << len(EVENTS)) - 1
CLASSES = vocabulary.CLASSES
MAX_COUNT = 2**63 - 1
MAX_PAIRS = 10000


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
    raise Skip(f"malformed: bad field: {field}")


# Note [A newer minor version adds fields and values]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A record of a newer minor version may hold fields and enum values this
# reader does not know: a new event, device class, written_at, job_source,
# role or events_logged_by. Such a record is still evidence, so it is
# counted: an unknown event or class is kept under its own name (in
# processes_with, passes_per_class and threading_cost, after the known ones),
# an unknown role counts as "other", and the rest are not read. The schema
# says the same: its enums list the known values as examples of a string.
def events_of(value) -> Tuple[int, Tuple[str, ...]]:
    """The known events as bits, and the unknown ones by name."""
    if type(value) is not list:
        raise Skip("malformed: bad field: events")
    bits = 0
    others: Tuple[str, ...] = ()
    for name in value:
        if type(name) is not str:
            raise Skip("malformed: bad field: events")
        bit = EVENT_BITS.get(name)
        if bit is None:
            if name in others:
                raise Skip("malformed: bad field: events")  # twice
            others += (name,)
        elif bits & bit:  # twice
            raise Skip("malformed: bad field: events")
        else:
            bits |= bit
    return bits, others


def pass_classes_of(value) -> Tuple[Optional[Tuple[int, ...]], Optional[Dict[str, int]]]:
    """The known classes' counts in CLASSES order, and the unknown ones."""
    if value is None:
        return None, None
    if type(value) is not dict:
        raise Skip("malformed: bad field: pass_classes")
    try:
        known = tuple(_count(value[c], "pass_classes") for c in CLASSES)
    except KeyError:
        raise Skip("malformed: bad field: pass_classes") from None
    others = None
    if len(value) > len(CLASSES):
        others = {c: _count(n, "pass_classes") for c, n in value.items() if c not in CLASSES}
    return known, others


def _pairs(measured) -> Sequence[Sequence[int]]:
    """`measured`'s pairs (off_ns, on_ns), each a count of the schema's from
    1. The common case (lists of two ints) is checked in C loops: a record's
    pairs are most of what the report reads."""
    if type(measured) is not list or len(measured) > MAX_PAIRS:
        raise Skip("malformed: bad field: threading_cost")
    if not measured:
        return measured
    if set(map(type, measured)) == _LIST and set(map(len, measured)) == _TWO:
        offs, ons = zip(*measured)
        if set(map(type, offs)) == _INT and set(map(type, ons)) == _INT:
            if (
                min(offs) >= 1
                and min(ons) >= 1
                and max(offs) <= MAX_COUNT
                and max(ons) <= MAX_COUNT
            ):
                return measured
            raise Skip("malformed: bad field: threading_cost")
    pairs = []
    for pair in measured:
        if type(pair) is not list or len(pair) != 2:
            raise Skip("malformed: bad field: threading_cost")
        checked = []
        for v in pair:
            if type(v) is float and v.is_integer():
                v = int(v)
            if type(v) is not int or not 1 <= v <= MAX_COUNT:
                raise Skip("malformed: bad field: threading_cost")
            checked.append(v)
        pairs.append(checked)
    return pairs


_LIST, _TWO, _INT = {list}, {2}, {int}


# Note [Grouping by where the threads ran]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A measured process's placement (Note [Where the measured threads ran],
# torch/csrc/autograd/thread_placement.h) reads, for `report --by-placement`,
# as one short key: the CPUs its measured threads could use together (the
# union of their affinities), and its cgroup's CPU quota where one is set:
# "1 CPU", "2 CPUs", "64 CPUs, quota 4". Processes pinned alike group
# together, and free ones group by the machine they had. A record without a
# placement (schema 2.1) reads as "placement unknown".
UNKNOWN_PLACEMENT = "placement unknown"


def placement_key(affinities: Sequence[str], quota: Optional[float]) -> str:
    """The key of threads with these CPU lists, in a cgroup with this CPU
    quota. Only the report made with --by-placement computes it: a Record
    keeps what it is made of (Record.placement)."""
    ranges = []
    for cpu_list in affinities:
        for part in filter(None, cpu_list.split(",")):
            first, _, last = part.partition("-")
            ranges.append((int(first), int(last or first)))
    # The union's size, range by range: a list is short, its ranges any size.
    cpus, reached = 0, -1
    for first, last in sorted(ranges):
        first = max(first, reached + 1)
        if last >= first:
            cpus += last - first + 1
            reached = last
    key = f"{cpus} CPU{'s' if cpus != 1 else ''}"
    return key + (f", quota {quota:g}" if quota is not None else "")


def _placement(value) -> Optional[Tuple[Tuple[str, ...], Optional[float]]]:
    """The placement's threads' affinities and its quota, what its key
    (Note [Grouping by where the threads ran]) is made of, checked as the
    schema checks them; None when the record has none."""
    if value is _MISSING:
        return None
    if type(value) is not dict:
        raise Skip("malformed: bad field: threading_cost")
    try:
        threads, quota, intra_op = value["threads"], value["cpu_quota"], value["intra_op_threads"]
    except KeyError:
        raise Skip("malformed: bad field: threading_cost") from None
    if type(threads) is not dict:
        raise Skip("malformed: bad field: threading_cost")
    affinities = []
    for thread in threads.values():
        if type(thread) is not dict:
            raise Skip("malformed: bad field: threading_cost")
        try:
            affinity, ran_on = thread["affinity"], thread["ran_on"]
        except KeyError:
            raise Skip("malformed: bad field: threading_cost") from None
        for cpu_list in (affinity, ran_on):
            if type(cpu_list) is not str or not CPU_LIST.search(cpu_list):
                raise Skip("malformed: bad field: threading_cost")
        affinities.append(affinity)
    if quota is not None and (type(quota) not in (int, float) or not quota > 0):
        raise Skip("malformed: bad field: threading_cost")
    if type(intra_op) is float and intra_op.is_integer():
        intra_op = int(intra_op)
    if type(intra_op) is not int or intra_op < -1:
        raise Skip("malformed: bad field: threading_cost")
    return tuple(affinities), quota


def _threading_cost(value) -> Optional[Dict[str, Tuple[float, float, int]]]:
    """Per class, the process's value (median percent, median off - on in
    ns, pairs: Note [What an interval is over], cost_statistics.py), or None,
    checked as the schema checks the pairs and counters."""
    if value is None or value is _MISSING:
        return None
    if type(value) is not dict:
        raise Skip("malformed: bad field: threading_cost")
    try:
        pairs, not_sampled, discarded = value["pairs"], value["not_sampled"], value["discarded"]
    except KeyError:
        raise Skip("malformed: bad field: threading_cost") from None
    for counts in (not_sampled, discarded):
        if type(counts) is not dict:
            raise Skip("malformed: bad field: threading_cost")
        for n in counts.values():
            _count(n, "threading_cost")
    rate = value.get("rate", 0)
    if type(rate) not in (int, float) or not 0 <= rate <= 1:  # NaN fails too
        raise Skip("malformed: bad field: threading_cost")
    for field in ("warmup", "max_pairs", "washout"):
        _count(value.get(field, 0), "threading_cost")
    if type(pairs) is not dict:
        raise Skip("malformed: bad field: threading_cost")
    out = {}
    for device_class, measured in pairs.items():
        pairs = _pairs(measured)
        if pairs:
            out[device_class] = (*process_value(pairs), len(pairs))
    return out


class Record:
    """What the report reads of one record."""

    __slots__ = (
        "threading_cost",
        "job",
        "host",
        "pid",
        "parent",
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
        "placement",
    )


# A Record as a tuple of its fields, in Record.__slots__ order: what the
# report's cache keeps (Note [The report's cache], report_cache.py) and the
# compiled decoding gives (Note [A record's fields in compiled code],
# record_decoder.py), read by the same attribute names as a Record.
RecordFields = collections.namedtuple("RecordFields", Record.__slots__)

_MISSING = object()


def parse_record(record) -> Record:
    """The record's fields the report uses, checked; raises Skip. Accepts
    exactly the records schema/process_record.schema.json accepts (major
    version 2, any minor version), and the first format's records
    (`"schema": 1`), whose missing fields it infers."""
    if type(record) is not dict:
        raise Skip("malformed: not a record")
    get = record.get
    schema = get("schema")
    if type(schema) is not str or not READABLE_SCHEMA.search(schema):
        if type(schema) is int and schema == 1:
            return _parse_first_format(record)
        newer = ANY_SCHEMA.search(schema) if type(schema) is str else None
        if newer and int(newer.group(1)) > SCHEMA_MAJOR:
            raise Skip("newer schema")
        raise Skip("malformed: bad field: schema")
    r = Record()
    # Required, and read by the report.
    r.host = host = get("host")
    r.job = job = get("job")
    start = get("start_time")
    if type(host) is not str:
        raise Skip("malformed: bad field: host")
    if type(job) is not str or not job:
        raise Skip("malformed: bad field: job")
    if type(start) is not str or not START_TIME.search(start):
        raise Skip("malformed: bad field: start_time")
    r.start_time = start[:19]
    r.role = role = get("role")
    if type(role) is not str:
        raise Skip("malformed: bad field: role")
    rank = get("rank", _MISSING)
    r.rank = None if rank is None else _count(None if rank is _MISSING else rank, "rank")
    torch = get("torch")
    if type(torch) is not dict or type(torch.get("running")) is not str:
        raise Skip("malformed: bad field: torch")
    if type(torch.get("built_for", "")) is not str:
        raise Skip("malformed: bad field: torch")
    r.torch = torch["running"]
    r.events, r.other_events = events_of(get("events"))
    r.ran_backward = get("ran_backward")
    if type(r.ran_backward) is not bool:
        raise Skip("malformed: bad field: ran_backward")
    r.pass_classes, r.other_classes = pass_classes_of(get("pass_classes", _MISSING))
    reason = get("disabled_reason", _MISSING)
    if reason is not None and type(reason) is not str:
        raise Skip("malformed: bad field: disabled_reason")
    r.disabled_reason = reason
    cost = get("threading_cost", _MISSING)
    r.threading_cost = _threading_cost(cost)
    r.placement = None if r.threading_cost is None else _placement(cost.get("placement", _MISSING))
    r.pid = _count(get("pid"), "pid")
    r.parent = _parent(get("parent", _MISSING))
    # Required or constrained by the schema, though the report reads none of
    # them: the reader accepts exactly what the schema accepts.
    _count(get("passes_classified"), "passes_classified")
    if type(get("program")) is not str:
        raise Skip("malformed: bad field: program")
    for field in ("job_source", "events_logged_by"):
        if type(get(field)) is not str:
            raise Skip(f"malformed: bad field: {field}")
    for field in ("time", "library_version", "activated_by", "written_at"):
        if type(get(field, "")) is not str:
            raise Skip(f"malformed: bad field: {field}")
    if type(get("calling_thread", False)) is not bool:
        raise Skip("malformed: bad field: calling_thread")
    if type(get("accelerators", {})) is not dict:
        raise Skip("malformed: bad field: accelerators")
    return r


def _parent(value) -> Optional[Tuple[int, Optional[str]]]:
    """The record's parent (2.3) as (pid, start time to the second), or None
    where the record has none."""
    if value is _MISSING:
        return None
    if type(value) is not dict:
        raise Skip("malformed: bad field: parent")
    start = value.get("start_time", _MISSING)
    if start is _MISSING or (
        start is not None and (type(start) is not str or not START_TIME.search(start))
    ):
        raise Skip("malformed: bad field: parent")
    return (_count(value.get("pid"), "parent"), None if start is None else start[:19])


def _parse_first_format(record: dict) -> Record:
    """A record of the first format, before job_source, role, start_time and
    ran_backward: those are inferred."""
    r = Record()
    r.job = record.get("job")
    if type(r.job) is not str or not r.job:
        raise Skip("malformed: bad field: job")
    host = record.get("host")
    r.host = host if type(host) is str else "?"
    r.pid = _count(record.get("pid"), "pid")
    r.parent = None
    rank = record.get("rank")
    r.rank = None if rank is None else _count(rank, "rank")
    r.role = "rank" if r.rank is not None else "other"
    r.start_time = None
    r.events, r.other_events = events_of(record.get("events"))
    r.pass_classes, r.other_classes = pass_classes_of(record.get("pass_classes"))
    torch = record.get("torch")
    running = torch.get("running") if type(torch) is dict else None
    r.torch = running if type(running) is str else "?"
    reason = record.get("disabled_reason")
    r.disabled_reason = reason if type(reason) is str else None
    r.threading_cost = r.placement = None
    passes = record.get("passes_classified")
    r.ran_backward = bool(
        r.events or (type(passes) is int and passes > 0) or sum(r.pass_classes or ())
    )
    return r
