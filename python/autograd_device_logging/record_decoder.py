"""A record's bytes to a Record: msgspec's typed decoding where it is
installed, record_fields' exact checks otherwise and whenever it refuses.

Note [Two ways to read a record]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
record_fields.parse_record checks a parsed record against the schema in
Python. It is exact (test_fleet_report_reader.py holds it to jsonschema on
random records), but a record with 64 measured pairs costs it about 25 us,
most of the report's time on a large fleet. Where msgspec is installed,
decode() first decodes the bytes straight into the typed `_Record` below,
which checks types and bounds in C while it parses. That path accepts a
subset of what the schema accepts: the records as the library writes them,
every count a JSON integer and every field of its type. It builds the same
Record through the same helpers. Anything it refuses (a whole-number float
where a count is, the first format, a newer major version, a file that is
not JSON) goes to the exact path, which decides and names the reason. So
both accept the same files, and the tests run every record through both.

Note [The pairs' values in compiled code]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A rank's record holds up to MAX_PAIRS measured pairs per device class (64
by default), and giving each of 128 numbers a Python object, then sorting
them, was most of a large report's time (about 20 of 23 us per record). So
msgspec leaves the pairs as their JSON text (msgspec.Raw, which it has
checked is JSON), and _record_decoding, a CPython extension built where
simdjson is installed (python/csrc/record_decoding.cpp), parses that
text and gives each class's value, in about a fifth of the time. It takes
only the plain shape: objects of arrays of [off, on] integers from 1 to
2^53, no class named twice, at most MAX_PAIRS pairs a class. Then every
ratio, difference and median is a double that process_value's int
arithmetic also gives exactly (integers below 2^53 convert to doubles
exactly, and IEEE division and the one rounding of a sum are Python's), and
the median is the same order statistic, so the value is the same to the
bit. Anything else (a count above 2^53, a whole float, a class named twice)
it leaves to the Python path below, which decides as before. Without the
extension (no simdjson where the package was built, or the source tree) the
Python path values every record: the same report, slower.
test_fleet_report_reader.py (TestCompiledPairsValues) holds the two to each other
on generated pairs, bit for bit.

Note [A record's fields in compiled code]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Even so, msgspec's typed decoding, the second parse of the pairs and the
Python that builds a Record cost about 10 us a record. So where
_record_decoding is built, decode() first hands the bytes to its
record_fields, which parses them once (simdjson), checks every field
_Record declares as msgspec would, values the pairs as above, and gives the
Record's fields as a tuple (a RecordFields) in about 5 us. It takes only the
plain shape the library writes: every known field once (a field given twice
is left, as is a thread or a torch field given twice), every count a JSON
integer, a number where a float is an integer below 2^53 or a JSON float,
only the known events and classes, each once, and the patterns checked
strictly (a trailing newline, which Python's `$` lets through, is left). It
leaves anything else (returns None), and then msgspec's typed decoding and
the exact checks decide as before: so every record it decodes is one those
read to the same fields, and every other record is read as it was. The
vocabulary (events, classes, MAX_PAIRS) comes from record_fields at import.
The strings many records repeat (job, host, role, release, class) come
interned, one object each: the counts and the cache's parts hold them once,
and marshal writes a shared object once (a tenth off the cache on the scale
benchmark's fleet, and 15 MB off the report's memory).
test_fleet_report_reader.py runs every generated record through the three
decodings (read_both_ways) and holds what the compiled one takes and leaves
(TestCompiledRecordFields).
"""

from __future__ import annotations

import json
import operator
from typing import Annotated, Dict, List, Optional, Tuple, Union

from .cost_statistics import process_value
from .record_fields import (
    CLASSES,
    CPU_LIST,
    EVENT_BITS,
    MAX_COUNT,
    MAX_PAIRS,
    READABLE_SCHEMA,
    START_TIME,
    Record,
    RecordFields,
    events_of,
    parse_record,
    pass_classes_of,
)

try:
    import msgspec
except ImportError:
    msgspec = None

try:
    from ._record_decoding import (
        keep_records,
        load_parts,
        pairs_values,
        record_fields,
        set_vocabulary,
    )
except ImportError:  # Note [The pairs' values in compiled code]
    keep_records = load_parts = pairs_values = record_fields = None
else:
    assert list(EVENT_BITS.values()) == [1 << i for i in range(len(EVENT_BITS))]
    set_vocabulary(tuple(EVENT_BITS), tuple(CLASSES), MAX_PAIRS)


def _not_json(name: str):
    raise ValueError(f"{name} is not JSON")


def decode_exactly(data) -> Record:
    """The Record in `data` by record_fields' exact checks. Only JSON is
    read: NaN and Infinity, which Python's json reads and JSON has not, make
    the file unreadable, as they do for msgspec (and the schema, which
    describes JSON documents, never sees them)."""
    return parse_record(json.loads(bytes(data).decode("utf-8"), parse_constant=_not_json))


if msgspec is None:
    decode_typed = decode_exactly
else:
    _Meta = msgspec.Meta
    _Count = Annotated[int, _Meta(ge=0, le=MAX_COUNT)]
    _Duration = Annotated[int, _Meta(ge=1, le=MAX_COUNT)]

    class _Torch(msgspec.Struct):
        running: str
        built_for: str = ""

    _CpuList = Annotated[str, _Meta(pattern=CPU_LIST.pattern)]

    class _Thread(msgspec.Struct):
        affinity: _CpuList
        ran_on: _CpuList

    class _Placement(msgspec.Struct):
        threads: Dict[str, _Thread]
        cpu_quota: Optional[Annotated[float, _Meta(gt=0)]]
        intra_op_threads: Annotated[int, _Meta(ge=-1)]

    _Pairs = Dict[str, Annotated[List[Tuple[_Duration, _Duration]], _Meta(max_length=MAX_PAIRS)]]

    class _ThreadingCost(msgspec.Struct):
        # Valued apart (Note [The pairs' values in compiled code]).
        pairs: msgspec.Raw
        not_sampled: Dict[str, _Count]
        discarded: Dict[str, _Count]
        rate: Annotated[float, _Meta(ge=0, le=1)] = 0.0
        warmup: _Count = 0
        max_pairs: _Count = 0
        washout: _Count = 0
        placement: Union[_Placement, msgspec.UnsetType] = msgspec.UNSET

    class _Parent(msgspec.Struct):
        pid: _Count
        start_time: Optional[Annotated[str, _Meta(pattern=START_TIME.pattern)]]

    class _Record(msgspec.Struct):
        # What record_fields.parse_record checks, as types; the fields it does
        # not read are not declared, so they are not read here either.
        schema: Annotated[str, _Meta(pattern=READABLE_SCHEMA.pattern)]
        host: str
        pid: _Count
        start_time: Annotated[str, _Meta(pattern=START_TIME.pattern)]
        program: str
        job: Annotated[str, _Meta(min_length=1)]
        job_source: str
        role: str
        rank: Optional[_Count]
        torch: _Torch
        events: List[str]
        events_logged_by: str
        ran_backward: bool
        passes_classified: _Count
        disabled_reason: Optional[str]
        pass_classes: Optional[Dict[str, _Count]]
        threading_cost: Optional[_ThreadingCost] = None
        time: str = ""
        library_version: str = ""
        activated_by: str = ""
        written_at: str = ""
        accelerators: dict = msgspec.field(default_factory=dict)
        parent: Union[_Parent, msgspec.UnsetType] = msgspec.UNSET
        calling_thread: bool = False

    _decoder = msgspec.json.Decoder(_Record)
    _pairs_decoder = msgspec.json.Decoder(_Pairs)
    _refused = (msgspec.ValidationError, msgspec.DecodeError)

    def values_in_python(text) -> Optional[Dict[str, Tuple[float, float, int]]]:
        """The pairs in `text` (their JSON), valued in Python: {class:
        (percent, difference in ns, pairs)} for each class with pairs; None
        where the typed decoder refuses them."""
        try:
            pairs_of = _pairs_decoder.decode(text)
        except _refused:
            return None
        return {
            device_class: (*process_value(pairs), len(pairs))
            for device_class, pairs in pairs_of.items()
            if pairs
        }

    def decode_typed(data) -> Record:
        """The Record in `data`, any bytes-like object, by msgspec's typed
        decoding (Note [Two ways to read a record]); raises
        record_fields.Skip, or ValueError or RecursionError for bytes that
        are not JSON."""
        try:
            d = _decoder.decode(data)
        except _refused:
            return decode_exactly(data)
        r = Record()
        r.host, r.job, r.role, r.rank, r.pid = d.host, d.job, d.role, d.rank, d.pid
        parent = d.parent
        r.parent = (
            None
            if parent is msgspec.UNSET
            else (
                parent.pid,
                None if parent.start_time is None else parent.start_time[:19],
            )
        )
        r.start_time = d.start_time[:19]
        r.torch = d.torch.running
        r.events, r.other_events = events_of(d.events)
        r.ran_backward = d.ran_backward
        r.pass_classes, r.other_classes = pass_classes_of(d.pass_classes)
        r.disabled_reason = d.disabled_reason
        cost = d.threading_cost
        if cost is None:
            r.threading_cost = r.placement = None
        else:
            placement = cost.placement
            r.placement = (
                None
                if placement is msgspec.UNSET
                else (tuple(t.affinity for t in placement.threads.values()), placement.cpu_quota)
            )
            # Note [The pairs' values in compiled code]
            values = None if pairs_values is None else pairs_values(cost.pairs, MAX_PAIRS)
            if values is None:
                values = values_in_python(cost.pairs)
                if values is None:
                    return decode_exactly(data)
            r.threading_cost = values
        return r


_from_fields = RecordFields._make
# A Record's fields as a plain tuple (a record's part: Note [A record's
# part, kept], report_cache.py).
as_fields = operator.attrgetter(*Record.__slots__)


def decode(data):
    """The Record in `data`, any bytes-like object: its fields in compiled
    code where the record has the plain shape (Note [A record's fields in
    compiled code]; then a RecordFields, read as a Record is), else by
    msgspec's typed decoding and record_fields' exact checks (Note [Two ways
    to read a record]); raises record_fields.Skip, or ValueError or
    RecursionError for bytes that are not JSON."""
    if record_fields is not None:
        fields = record_fields(data)
        if fields is not None:
            return _from_fields(fields)
    return decode_typed(data)


def decode_fields(data) -> tuple:
    """decode(data)'s fields as a plain tuple, in Record.__slots__ order
    (a record's part: Note [A record's part, kept], report_cache.py)."""
    if record_fields is not None:
        fields = record_fields(data)
        if fields is not None:
            return fields
    return as_fields(decode_typed(data))
