"""The report's index of the record files it read (Note [The files'
index]): listing the directory against it, and its bulk operations, in
compiled code where the package was built (python/csrc/file_index.cpp)."""

from __future__ import annotations

import hashlib
import os
import stat
from array import array
from collections import Counter
from typing import Dict, Optional, Tuple

from .record_fields import Record

try:
    from ._record_files import (
        changed_groups,
        in_group_order,
        keep_unchanged_in_place,
        list_and_check,
        names_in,
        pack_entries,
        part_logs,
        read_files,
        scan_directory,
        spans_in,
        unchanged_entries,
    )
except ImportError:  # Note [Reading the files in compiled code]
    changed_groups = names_in = part_logs = read_files = scan_directory = None
    in_group_order = list_and_check = pack_entries = spans_in = unchanged_entries = None
    keep_unchanged_in_place = None

# A file's key (Note [The report's cache], report_cache.py).
Key = Tuple[int, int, int]


def is_record_name(name: str) -> bool:
    return name.endswith(".json") and not name.startswith(".")


# Note [Reading the files in compiled code]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Opening, checking and reading a small file costs the kernel about 5 us,
# and Python's os.open, os.fstat, os.readv and os.close, with the objects
# they make and the exceptions that carry a skip, about 3 us more. So where the
# package was built (python/csrc/record_files.cpp, which needs only Python's
# headers), _record_files.read_files does for CHUNK names at a time what
# read_record does, in one call: the same flags (no link followed, no FIFO
# waited on), the same key (st_size, st_mtime_ns, st_ino) from the same
# stat, the same reasons for a file it does not read; scan_directory lists
# as scan does, and list_and_check lists and checks the keys as
# scan_and_check does, in threads of its own. Only the decoding stays in
# Python. Without the extension (the source tree) the Python path does it
# all: the same report. test_report_cache.py
# (TestCompiledFileReading) holds the two to each other on directories of
# every kind of entry, cached and not.


# Note [The files' index]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# What the report's cache knows of each file it read (Note [The report's
# cache], report_cache.py) is six integers: the file's key (st_size,
# st_mtime_ns, st_ino); its group, a 64-bit hash of the job its record
# counted in (even) or of the reason it was skipped (odd); and where its
# record's part is (Note [A record's part, kept]): the part log's number
# and the part's CRC-32 in one (0 for none), the part's offset and length in
# the other. Names are kept as one bytes object, each followed by a "/"
# (which no name holds), and the integers as one array, so that a million
# files load in a fraction of a second and cross between processes as two
# buffers. A group needs no table: two jobs of one hash only make a re-run
# count both again, and the parity keeps a job from ever reading as a reason.
SIZE, MTIME, INODE, GROUP, PART_LOG, PART_SPAN = range(6)
# Where a record's job is among its fields (a record's part).
JOB = Record.__slots__.index("job")
# The most jobs' groups IndexEntries remembers.
GROUPS_KEPT = 1 << 16
FIELDS = 6
SPAN_LENGTH_BITS = 24
GROUP_BYTES = 8


def without_parts(keys: bytes) -> bytes:
    """Packed entries (FIELDS int64 each) saying no part: their parts could
    not be written."""
    packed = array("q")
    packed.frombytes(keys)
    count = len(packed) // FIELDS
    packed[PART_LOG::FIELDS] = array("q", bytes(8 * count))
    packed[PART_SPAN::FIELDS] = array("q", bytes(8 * count))
    return packed.tobytes()


def group_of(name: str, reason: bool = False) -> int:
    """The group of a job's records, or of the files skipped for `reason`
    (Note [The files' index]), as a signed 64-bit int."""
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogatepass"), digest_size=GROUP_BYTES
    ).digest()
    return signed((int.from_bytes(digest, "little") & ~1) | reason)


def signed(value: int) -> int:
    """An unsigned 64-bit value (an inode number, a hash) as the signed one
    of the same bits, which array("q") holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


class IndexEntries:
    """Files' entries (Note [The files' index]) as they are read."""

    __slots__ = ("names", "keys", "reasons", "_jobs", "_reasons")

    def __init__(self):
        self.names = bytearray()
        self.keys = array("q")
        # The skipped files' groups -> their reasons.
        self.reasons: Dict[int, str] = {}
        # Job -> its group, and reason -> its group, each computed once.
        self._jobs: Dict[str, int] = {}
        self._reasons: Dict[str, int] = {}

    def skip(self, name: bytes, key: Key, reason: str) -> None:
        """The entry of a file skipped for `reason`."""
        group = self._reasons.get(reason)
        if group is None:
            group = self._reasons[reason] = group_of(reason, True)
            self.reasons[group] = reason
        size, mtime_ns, inode = key
        self.names += name
        self.names += b"/"
        self.keys.extend((size, mtime_ns, signed(inode), group, 0, 0))

    def extend(self, records: list, places: Optional[list]) -> None:
        """The entries of the files of `records` ((name, key, record or
        its fields) each), each counted in its record's job, its part at
        `places` (None: none)."""
        jobs = self._jobs
        for job in {r[JOB] for _, _, r in records}.difference(jobs):
            jobs[job] = group_of(job)
        self.names += b"/".join([name for name, _, _ in records])
        self.names += b"/"
        if pack_entries is not None:
            groups = [jobs[r[JOB]] for _, _, r in records]
            self.keys.frombytes(pack_entries(records, groups, places))
            return
        if places is None:
            places = ((0, 0),) * len(records)
        self.keys.extend(
            [
                value
                for (_, (size, mtime_ns, inode), r), (log, span) in zip(records, places)
                for value in (
                    size,
                    mtime_ns,
                    inode - (1 << 64) if inode >= 1 << 63 else inode,  # signed()
                    jobs[r[JOB]],
                    log,
                    span,
                )
            ]
        )

    def extend_packed(self, names: bytes, keys: bytes, jobs: list) -> None:
        """The entries of files kept in compiled code (record_decoding's
        keep_records): their names ("/"-ended), their entries packed with
        no group, and the job each record counts in."""
        if not jobs:
            return
        memo = self._jobs
        for job in set(jobs).difference(memo):
            memo[job] = group_of(job)
        packed = array("q")
        packed.frombytes(keys)
        packed[GROUP::FIELDS] = array("q", [memo[job] for job in jobs])
        self.names += names
        self.keys.extend(packed)

    def size(self) -> int:
        return len(self.keys) // FIELDS

    def take(self) -> Tuple[bytes, bytes, Dict[int, str]]:
        """The entries so far as two buffers, with the reasons of their
        skipped files' groups; they then leave."""
        names, keys, reasons = bytes(self.names), self.keys.tobytes(), self.reasons
        self.names, self.keys, self.reasons = bytearray(), array("q"), {}
        # The groups of the jobs met, kept for the next entries up to
        # GROUPS_KEPT jobs: a reading process meets most jobs of a large
        # fleet, and hashing each again at every take cost a tenth of the
        # entries' time, keeping them all some MB.
        if len(self._jobs) > GROUPS_KEPT:
            self._jobs.clear()
        return names, keys, reasons


def scan(directory_fd: int, index, skipped: Counter) -> Tuple[bytes, bytearray]:
    """(the names to read, "/"-ended; which of `index`'s entries are
    unchanged): lists the directory, counting entries that are no regular
    file in `skipped`; a name `index` (names, keys: Note [The files' index])
    holds whose key is unchanged (from lstat, no link followed) and that is
    still a regular file is not to be read (checked). None: every record
    name is."""
    if scan_directory is not None:
        listed, links, others = scan_directory(directory_fd)
        if links:
            skipped["symbolic link"] += links
        if others:
            skipped["not a regular file"] += others
    else:
        listed = bytearray()
        # From the start, whoever listed this descriptor before (os.scandir
        # lists from where its offset is, which it shares).
        os.lseek(directory_fd, 0, os.SEEK_SET)
        with os.scandir(directory_fd) as entries:
            for entry in entries:
                if not is_record_name(entry.name):
                    continue
                if entry.is_symlink():
                    skipped["symbolic link"] += 1
                elif not entry.is_file(follow_symlinks=False):
                    skipped["not a regular file"] += 1
                else:
                    listed += entry.name.encode("utf-8", "surrogateescape")
                    listed += b"/"
        listed = bytes(listed)
    if index is None or not index[0]:
        return listed, bytearray(0 if index is None else len(index[1]) // FIELDS)
    return checked(directory_fd, listed, index)


def _key_unchanged(directory_fd: int, name: bytes, keys: array, i: int) -> bool:
    """Whether `name` is still a regular file of the key of entry `i`."""
    try:
        st = os.lstat(name, dir_fd=directory_fd)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and keys[FIELDS * i : FIELDS * i + 3] == array(
        "q", (st.st_size, st.st_mtime_ns, signed(st.st_ino))
    )


def checked(directory_fd: int, listed: bytes, index) -> Tuple[bytes, bytearray]:
    """scan's outcome for the names `listed` (as scan(directory_fd, None,
    ...) gave them) and `index` (names, keys), in Python."""
    names, keys = index
    unchanged = bytearray(len(keys) // FIELDS)
    position = {name: i for i, name in enumerate(names.split(b"/")[:-1])}
    out = bytearray()
    for name in listed.split(b"/")[:-1]:
        i = position.get(name)
        if i is not None and _key_unchanged(directory_fd, name, keys, i):
            unchanged[i] = 1
            continue
        out += name
        out += b"/"
    return bytes(out), unchanged


def scan_and_check(directory_fd: int, load, skipped: Counter) -> Tuple[bytes, bytearray]:
    """scan(directory_fd, load(), skipped), where load() gives the index
    (names, keys) or None: in compiled code, load() runs while a thread
    lists the directory, and the index's keys are checked while it still
    does (Note [The keys are checked while listing], file_index.cpp)."""
    if list_and_check is None:
        return scan(directory_fd, load(), skipped)
    listed, links, others, unchanged = list_and_check(directory_fd, load)
    if links:
        skipped["symbolic link"] += links
    if others:
        skipped["not a regular file"] += others
    return listed, bytearray(0) if unchanged is None else unchanged


def changed_groups_of(
    names: bytes, keys: array, unchanged: bytearray, reasons: dict, skipped: Counter
) -> set:
    """The jobs' groups of the entries that changed or went; the unchanged
    skipped files counted in `skipped` by their reason. ValueError for a
    group of no known reason: a cache this reader did not write."""
    if changed_groups is not None:
        changed, counts = changed_groups(names, keys, unchanged)
        for group, n in counts.items():
            reason = reasons.get(group)
            if reason is None:
                raise ValueError("a skipped file's group of no known reason")
            skipped[reason] += n
        return changed
    groups = keys[GROUP::FIELDS]
    changed = {g for g, u in zip(groups, unchanged) if not u and not g & 1}
    for g, u in zip(groups, unchanged):
        if u and g & 1:
            reason = reasons.get(g)
            if reason is None:
                raise ValueError("a skipped file's group of no known reason")
            skipped[reason] += 1
    return changed


def names_of(names: bytes, keys: array, unchanged: bytearray, groups: set) -> bytes:
    """The unchanged entries' names of `groups`, "/"-ended; those entries
    become changed (read again)."""
    if names_in is not None:
        return names_in(names, keys, unchanged, groups)
    out = bytearray()
    for i, (name, g) in enumerate(zip(names.split(b"/"), keys[GROUP::FIELDS])):
        if unchanged[i] and g in groups:
            unchanged[i] = 0
            out += name
            out += b"/"
    return bytes(out)


def unchanged_entries_of(names: bytes, keys: array, unchanged: bytearray) -> Tuple[bytes, bytes]:
    """The unchanged entries of the index, as two buffers."""
    if unchanged.count(0) == 0:
        return names, keys.tobytes()
    if unchanged_entries is not None:
        return unchanged_entries(names, keys, unchanged)
    kept_names = bytearray()
    kept = array("q")
    for i, name in enumerate(names.split(b"/")[:-1]):
        if unchanged[i]:
            kept_names += name
            kept_names += b"/"
            kept.extend(keys[FIELDS * i : FIELDS * (i + 1)])
    return bytes(kept_names), kept.tobytes()


def keep_unchanged_only(names: bytearray, keys: array, unchanged: bytearray) -> None:
    """Leaves only the unchanged entries in the index `names` and `keys`,
    in place (Note [The entries gone are left out in place],
    file_index.cpp)."""
    if keep_unchanged_in_place is not None:
        length, entries = keep_unchanged_in_place(names, keys, unchanged)
    else:
        kept_names, kept_keys = unchanged_entries_of(bytes(names), keys, unchanged)
        length, entries = len(kept_names), len(kept_keys) // (8 * FIELDS)
        names[:length] = kept_names
        keys[: entries * FIELDS] = array("q", kept_keys)
    del names[length:]
    del keys[entries * FIELDS :]


def spans_of(names: bytes, keys: array, unchanged: bytearray, groups: Optional[set]) -> array:
    """The parts of the unchanged entries of `groups` (None: of every
    job) as (group, log, span) triples (Note [The files' index]) in one
    array, in group order (group_ordered)."""
    out = array("q")
    if spans_in is not None:
        out.frombytes(spans_in(names, keys, unchanged, groups))
        return out
    for i, g in enumerate(keys[GROUP::FIELDS]):
        if unchanged[i] and (not g & 1 if groups is None else g in groups):
            out.extend(keys[FIELDS * i + GROUP : FIELDS * i + PART_SPAN + 1])
    group_ordered(out)
    return out


def group_ordered(spans: array) -> None:
    """Puts (group, log, span) triples in order, in place: by group, then
    by place (Note [Counting from the parts, job by job],
    fleet_report.py)."""
    if in_group_order is not None:
        in_group_order(spans)
        return
    ordered = sorted(zip(spans[0::3], spans[1::3], spans[2::3]))
    spans[:] = array("q", (value for triple in ordered for value in triple))


def part_logs_of(names: bytes, keys: array, unchanged: Optional[bytearray]) -> Tuple[set, int]:
    """(the logs the unchanged entries' parts are in, the bytes of those
    parts); None: of every entry."""
    if unchanged is None:
        unchanged = bytearray(b"\x01") * (len(keys) // FIELDS)
    if part_logs is not None:
        return part_logs(names, keys, unchanged)
    logs, live = set(), 0
    mask = (1 << SPAN_LENGTH_BITS) - 1
    for i, u in enumerate(unchanged):
        log = keys[FIELDS * i + PART_LOG]
        if u and log:
            logs.add((log & ((1 << 64) - 1)) >> 32)
            live += keys[FIELDS * i + PART_SPAN] & mask
    return logs, live
