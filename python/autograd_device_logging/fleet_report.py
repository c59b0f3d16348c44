"""Which jobs run multi-device or accelerator+CPU backward passes, and how often.

    python -m autograd_device_logging report DIR [--json] [--plot PNG]
        [--prometheus FILE] [--since WHEN] [--until WHEN] [--job NAME ...] [--by-placement]
        [--workers N] [--cache-dir DIR | --no-cache]
    autograd-device-logging-report DIR ...      (the same, as a console script)

DIR holds one record per process, written by the library when
AUTOGRAD_DEVICE_LOGGING_REPORT_DIR (or the launcher's --report) named it
(Note [The per-process record] in torch/csrc/autograd/process_record.h; the
format is schema/process_record.schema.json). The report runs offline: it
imports neither torch nor the library, writes nothing but what --plot and
--prometheus name and its cache in the user's own cache folder (Note [The
report's cache], report_cache.py), and needs only Python (matplotlib for --plot,
prometheus_client for --prometheus; msgspec, where installed, reads faster,
the more so where the package was built (Note [Reading the files in compiled
code], record_reader.py), with simdjson (Note [A record's fields in compiled
code], record_decoder.py), and tqdm shows progress on a terminal).

A row per job and one for all jobs. Its denominator is the processes that ran
at least one backward pass; a rank that restarted counts once per (job, host,
rank), with the union of its events. Left out, and counted per job: torchrun
agents, processes that ran no backward pass, and processes in which the
library was disabled (with the reason). Files that are not readable records
(not UTF-8, not JSON, a field of the wrong type, a newer major schema) are
skipped and counted by reason; nothing in DIR makes the report fail or wait.

Exit status: 0 when it reported, 1 when DIR holds no record it can count or
could not be read, 2 for a usage error (DIR is not a directory, a bad
option).
"""

from __future__ import annotations

import gc
import json
import marshal
import os
import queue as queue_module
import sys
import time
import zlib
from array import array
from collections import Counter
from functools import partial
from itertools import chain
from typing import Dict, Iterator, List, Optional

from .file_index import (
    FIELDS,
    GROUP,
    SPAN_LENGTH_BITS,
    IndexEntries,
    changed_groups_of,
    group_ordered,
    is_record_name,
    part_logs_of,
    scan,
    scan_and_check,
    spans_of,
)
from .fleet_report_options import make_parser, table_width
from .fleet_totals import ALL_JOBS, Assembled, FleetTotals, finished_jobs, kept_job
from .record_decoder import load_parts
from .record_fields import RecordFields
from .record_reader import CHUNK, chunks_of, keep_named, open_directory, read_named
from .report_cache import PartsLog, ReportCache, inside
from .report_text import format_table

# Files a reading process reads between two reports of its progress.
BATCH = 1000
# Records a reading process counts before it hands its counts over.
HAND_OVER = 16 * BATCH


class _Progress:
    """Files read, rate and time left, on stderr while it is a terminal
    (tqdm); nothing otherwise."""

    def __init__(self, directory: str, shown: Optional[bool]):
        self.bar = None
        if shown is None:
            shown = sys.stderr.isatty()
        if not shown:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        with os.scandir(directory) as entries:
            total = sum(1 for e in entries if is_record_name(e.name))
        self.bar = tqdm(
            total=total, desc="reading records", unit="file", file=sys.stderr, smoothing=0.1
        )

    def update(self, files: int) -> None:
        if self.bar is not None:
            self.bar.update(files)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _read_part(directory: str, names: TakenItems, options, keep: bool, logs, out) -> None:
    """A reading process: counts the records of the files of `directory`
    whose chunks of names it takes from `names` into totals of its own
    (Note [Reading a fleet in parallel]), saying how many files it read
    every BATCH, and hands the totals over, with the files' index entries
    where `keep`, and the records' parts in a log of its own where `logs`
    (Note [A record's part, kept], report_cache.py)."""
    parts = None
    try:
        totals = FleetTotals(*options)
        entries = IndexEntries() if keep else None
        if logs is not None:
            logs = logs.for_child()
            parts = logs.own()
            out.put(("log", parts.log, 0))
        read = 0

        def between(files: int) -> None:
            nonlocal read
            read += files
            out.put(("read", None, files))
            if read >= HAND_OVER:
                hand_over()
                read = 0

        def hand_over() -> None:
            for part in totals.drain():
                out.put(("part", marshal.dumps(part), 0))
            if entries is not None:
                out.put(("entries", entries.take(), 0))

        directory_fd = open_directory(directory)
        try:
            _read_here(directory_fd, names, totals, entries, between, parts)
        finally:
            os.close(directory_fd)
        if parts is not None:
            parts.close()  # every part in the log before its entries are kept
        hand_over()
        out.put(("done", None, 0))
    except BaseException as e:  # noqa: B036 -- the parent reports it
        out.put(("failed", f"{type(e).__name__}: {e}", 0))


class _Logs:
    """This run's logs of records' parts (Note [A record's part, kept],
    report_cache.py): each process's own, made at its first use."""

    def __init__(self, cache: ReportCache, cache_name: str):
        self.cache, self.cache_name = cache, cache_name
        self.mine: Optional[PartsLog] = None
        # The logs this run made, every process's.
        self.made: set = set()

    def own(self) -> PartsLog:
        if self.mine is None:
            self.mine = PartsLog(self.cache, self.cache_name)
            if self.mine.log:
                self.made.add(self.mine.log)
        return self.mine

    def for_child(self) -> "_Logs":
        """The logs of a forked reading process, which makes its own."""
        return _Logs(self.cache, self.cache_name)

    def close(self) -> None:
        if self.mine is not None:
            self.mine.close()


# Note [Reading a fleet in parallel]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Reading, checking and counting a record costs the same in any process, so
# the report reads with a process per core (at most
# fleet_report_options.MAX_WORKERS): this one and the reading processes it
# forks. This one lists the directory (record_reader.scan) and each process
# reads the chunks of the names to read it takes (Note [Each chunk is read
# by the first process to take it]), which it inherits, so no file is read
# twice and no name is sent. Each counts what it reads into FleetTotals of
# its own and, every HAND_OVER records and at the end, hands them over to
# this process as plain values (FleetTotals.drain, through marshal), which
# adds them to its own (FleetTotals.take), with the index entries of the
# files it read (Note [The files' index], record_reader.py) as two
# buffers: every count is a sum, a union or a rule on the records
# themselves (Note [A restarted rank counts once, under its newest
# release], fleet_totals.py), so the report does not depend on which
# process read what, nor on when counts were handed over. No record crosses
# from one process to another: sending each and counting every one in this
# process made it the slowest of them. Handing over as it goes keeps a
# reading process's counts small, so that the counts are held about once,
# as by a single process (the memory target). Nothing waits without a
# limit: a reading process that dies (killed, out of memory) fails the
# report with a message instead of leaving it waiting for counts that never
# come.
def _read_here(directory_fd: int, names, totals: FleetTotals, entries, between, parts=None) -> None:
    """Reads the files `names` (as record_reader.read_named takes them)
    into `totals` in this process (where `parts` is given, only their
    skipped files: the records are counted from their parts, Note
    [Counting from the parts, job by job]);
    `between(files)` runs after each BATCH files with how many were read."""
    if parts is not None:
        for files in keep_named(directory_fd, names, totals.skipped, entries, parts):
            between(files)
        return
    seen = 0
    add = totals.add
    for seen, record in enumerate(read_named(directory_fd, names, totals.skipped, entries), 1):
        add(record)
        if seen % BATCH == 0:
            between(BATCH)
    between(seen % BATCH)


def chunks_for(names: bytes, workers: int) -> List[bytes]:
    """`names` ("/"-ended) as chunks (chunks_of) of at most CHUNK names,
    at least one for each of `workers` processes where there are names
    enough."""
    count = names.count(b"/")
    return chunks_of(names, max(1, min(CHUNK, -(-count // workers))))


def _process_context():
    """multiprocessing's context for the report's processes: forked where
    the platform can. Forking is safe: the report imports neither torch nor
    the library, and starts no thread before its processes."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else None)


# Note [Each chunk is read by the first process to take it]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Given an even share each, the reading processes ended up to 0.35 s apart
# at 10^6 records on 2 cores (6 s of reading), and the counting processes
# 0.2 s apart (2.7 s of counting): one also takes what the others hand
# over, and a machine shared with others slows one process and not the
# other. So each process has the whole list of the work (the chunks of
# names, chunks_of; the runs of whole groups of parts, _runs_of) and takes
# the next item not yet taken, a counter in shared memory under its lock,
# until none is left: no item is done twice or left out, and a process that
# falls behind does fewer. Each lets go of its copy of every item up to
# the one it takes. A process that died holding the lock would hold up the
# others: the lock is waited for TAKE_TIMEOUT seconds at most.
TAKE_TIMEOUT = 60.0


class TakenItems:
    """A list of work, each item done by the first process to take it
    (Note [Each chunk is read by the first process to take it]): iterating
    gives this process's items. `taken` (a multiprocessing Value of "q",
    made before the processes are) counts the items taken in every
    process."""

    def __init__(self, items: list, taken):
        self.items = items
        self.taken = taken
        # This process has let go of the items before this one.
        self.kept_from = 0

    def __iter__(self) -> Iterator:
        items = self.items
        lock = self.taken.get_lock()
        while True:
            if not lock.acquire(timeout=TAKE_TIMEOUT):
                raise RuntimeError("no work could be taken: a report process died")
            try:
                i = self.taken.value
                if i < len(items):
                    self.taken.value = i + 1
            finally:
                lock.release()
            for j in range(self.kept_from, min(i, len(items))):
                items[j] = None
            if i >= len(items):
                self.kept_from = len(items)
                return
            item, items[i] = items[i], None
            self.kept_from = i + 1
            yield item


class _Readers:
    """The reading processes, and taking what they hand over."""

    def __init__(
        self,
        directory: str,
        shares,
        totals: FleetTotals,
        entries,
        logs,
        progress,
        target=None,
        jobs: Optional[dict] = None,
    ):
        """A process for each of `shares`: reading its names (_read_part),
        or `target`(share, out) where given; the jobs' parts they
        hand over go into `jobs`."""
        context = _process_context()
        self.totals, self.entries, self.logs, self.progress = totals, entries, logs, progress
        self.jobs = jobs
        # A counting process met a part it could not count.
        self.broken = False
        self.out = context.Queue()
        options = (
            None
            if totals is None
            else (totals.since, totals.until, totals.wanted, totals.by_placement)
        )
        self.processes = [
            context.Process(
                target=_read_part if target is None else target,
                args=(
                    (directory, share, options, entries is not None, logs, self.out)
                    if target is None
                    else (share, self.out)
                ),
                daemon=True,
            )
            for share in shares
        ]
        self.running = len(self.processes)
        for process in self.processes:
            process.start()

    def take(self, wait: bool) -> None:
        """Takes what the reading processes handed over, merging their
        totals; with `wait`, until every one is done."""
        while self.running:
            try:
                kind, payload, files = self.out.get(timeout=1.0) if wait else self.out.get_nowait()
            except queue_module.Empty:
                dead = [p.exitcode for p in self.processes if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"a reading process ended with status {dead[0]}") from None
                if not wait:
                    return
                continue
            if kind == "read":
                self.progress.update(files)
            elif kind == "part":
                self.totals.take(marshal.loads(payload))
            elif kind == "jobs":
                self.jobs.update(marshal.loads(payload))
            elif kind == "broken":
                self.broken = True
            elif kind == "entries":
                self.entries(*payload)
            elif kind == "log":
                if payload:
                    self.logs.made.add(payload)
            elif kind == "done":
                self.running -= 1
            else:
                raise RuntimeError(f"a reading process failed: {payload}")

    def close(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
            process.join()


class _IndexSink:
    """Where the index entries of the files read go (Note [The cache's
    file], report_cache.py): into the cache's next file as they come, with
    the jobs they name (counted again: Note [A re-run reads the jobs that
    changed]) and the reasons of the files skipped."""

    def __init__(self, writer, tracking: bool):
        self.writer = writer
        # Only a re-run asks which jobs were read.
        self.tracking = tracking
        self.touched: set = set()
        self.reasons: Dict[int, str] = {}
        self.entries = 0
        # The read records' parts, to count (spans_of).
        self.spans = array("q")

    def __call__(self, names: bytes, keys: bytes, reasons: Dict[int, str]) -> None:
        if self.writer is not None:
            self.writer.add(names, keys)
        count = len(keys) // (8 * FIELDS)
        self.entries += count
        entries = array("q")
        entries.frombytes(keys)
        if self.tracking:
            self.touched.update(g for g in set(entries[GROUP::FIELDS]) if not g & 1)
        if self.writer is not None:
            self.spans.extend(spans_of(names, entries, bytearray(b"\x01") * count, None))
        self.reasons.update(reasons)


def _read(directory, directory_fd, todo: list, workers, totals, sink, shown, logs=None) -> None:
    """Reads the files todo.pop() names ("/"-ended) into `totals`, with
    `workers` processes where there are enough names to share; the index
    entries of what was read go to `sink` (an _IndexSink), when it is not
    None. The names are let go as soon as they are shared (a million names
    are tens of MB)."""
    entries = None if sink is None else IndexEntries()
    names = todo.pop()
    parts = None if logs is None or not names else logs.own()
    workers = max(1, min(workers, names.count(b"/")))
    chunks = chunks_for(names, workers)
    del names

    def hand_over(files: int) -> None:
        shown.update(files)
        if entries is not None and entries.size() >= HAND_OVER:
            sink(*entries.take())

    if workers > 1:
        # Note [Each chunk is read by the first process to take it]
        shared = TakenItems(chunks, _process_context().Value("q", 0))
        del chunks
        readers = _Readers(directory, [shared] * (workers - 1), totals, sink, logs, shown)
        try:

            def between(files: int) -> None:
                hand_over(files)
                readers.take(False)

            _read_here(directory_fd, shared, totals, entries, between, parts)
            readers.take(True)
        finally:
            readers.close()
    else:
        _read_here(directory_fd, chunks, totals, entries, hand_over, parts)
    if entries is not None:
        sink(*entries.take())


# Note [Counting from the parts, job by job]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Where the cache keeps the records' parts (Note [A record's part, kept],
# report_cache.py), reading only decodes: each reading process appends its
# records' parts to its log and hands over their index entries, and no record
# is counted while it is read. Then every record of the jobs to count (all of
# them on a first run; on a re-run, those of the jobs that changed:
# Note [A re-run reads the jobs that changed]) is counted from its part, in
# group order (file_index.group_ordered: a job's parts together, each log read
# forwards), by as many processes as read, each taking a run of whole groups.
# So a job's counts are made at once, in one process, while they are in the
# processor's cache, and each finished job's part of the report
# (Note [A job's part of the report], fleet_totals.py), with its JSON line, is
# made there too and handed over every JOBS_PER_HAND_OVER jobs, which this
# process takes between its own runs (taken once it was done, the 4,600 jobs
# the other counted in a re-run at 10^6 records took 0.017 s to load after all
# the counting): the parent only assembles. Counting while reading, in the
# order the directory lists (no order of jobs), made and merged a job's counts
# about once per record and left the summaries and lines to one process: 13 of
# a cold run's 18 s at 10^6 records on 2 cores went to reading, 3 to the
# parent's tail. Without the cache (or where its folder cannot be written),
# the records are counted as they are read, as before. A part missing or not
# as its CRC says makes the report start again from the files alone
# (assemble_directory), with one line.
JOBS_PER_HAND_OVER = 1000
# Parts loaded at a time (then up to the end of a group).
PARTS_PER_LOAD = 4096


class _Counters:
    """The counting processes (Note [Counting from the parts, job by job]),
    forked before anything is loaded or read, while this process is small:
    a process forked later starts with all this one then holds (and is
    measured with it). Each waits for the parts to count, which it is sent
    as they are, through a pipe of its own: it takes runs of them (Note
    [Each chunk is read by the first process to take it])."""

    def __init__(self, cache, cache_name: str, options, processes: int):
        context = _process_context()
        # (the process's end, this one's) of each pipe.
        self.inboxes = [context.Pipe(duplex=False) for _ in range(processes)]
        # The runs of parts taken, in every process (TakenItems).
        self.taken = context.Value("q", 0)
        self.jobs: dict = {}
        self.readers = _Readers(
            "",
            self.inboxes,
            None,
            None,
            None,
            _Progress("", False),
            target=partial(_count_part, cache, cache_name, options, self.taken),
            jobs=self.jobs,
        )
        self.given = False

    def give(self, shares: list) -> None:
        """Sends each process one of `shares` (buffers of parts; nothing
        where none is left), emptying it."""
        self.given = True
        for _, sender in self.inboxes:
            sender.send_bytes(shares.pop() if shares else b"")

    def take(self, jobs: dict) -> bool:
        """Adds the jobs' parts they counted to `jobs`; whether every part
        they met could be counted."""
        self.readers.take(True)
        jobs.update(self.jobs)
        self.jobs.clear()
        return not self.readers.broken

    def close(self) -> None:
        if not self.given:
            self.give([])
        self.readers.close()


def _count_parts(
    cache, cache_name, todo: list, options, counters, meanwhile=None
) -> Optional[dict]:
    """The jobs' parts (fleet_totals.KeptJob) counted from the records'
    parts todo.pop() ((group, log, span) triples in group order), by this
    process and `counters` (_Counters, or None) where there are enough,
    each taking runs of whole groups (Note [Each chunk is read by the first
    process to take it]); None where a part is missing, its log is gone or
    it is not the part its CRC says. `meanwhile()` runs here once the
    others count, before this process takes its first run."""
    spans = todo.pop()
    triples = len(spans) // 3
    workers = 1 + (0 if counters is None else len(counters.inboxes))
    workers = max(1, min(workers, triples // BATCH))
    jobs: dict = {}
    taken = None
    if counters is not None:
        # None to those with nothing to count.
        counters.give([spans] * (workers - 1))
        taken = counters.taken if workers > 1 else None
    if meanwhile is not None:
        meanwhile()
    # Note [Counting from the parts, job by job]: what the others hand
    # over is taken between runs.
    between = None if taken is None else partial(counters.readers.take, False)
    whole = _count_here(cache, cache_name, spans, options, jobs.update, taken, between)
    del spans
    if counters is not None:
        whole = counters.take(jobs) and whole
    return jobs if whole else None


# Note [A job's group is kept with its part]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A re-run keeps the jobs of the cache whose group no file touched, and
# the group is a hash of the job's name (file_index.group_of): 0.6 us a
# job in Python, 0.035 s at 55,000 jobs on this project's 2-core machine,
# every re-run, for names that do not change. So a job's part holds its
# group (fleet_totals.KeptJob), hashed once where the part is made (in the
# counting processes, for the jobs they count), and a re-run compares the
# number it kept.
def _kept_as_they_were(kept: dict, touched: set) -> dict:
    """The jobs of `kept` (the cache's) whose group none of the files
    changed, came or went touched (Note [A re-run reads the jobs that
    changed])."""
    return {job: result for job, result in kept.items() if result[8] not in touched}


def _runs_of(places) -> List[tuple]:
    """The (start, end) of each run of whole groups of the triples
    `places`, of PARTS_PER_LOAD parts and up to the end of a group."""
    count = len(places) // 3
    groups = places[0::3]
    runs, start = [], 0
    while start < count:
        end = min(count, start + PARTS_PER_LOAD)
        while end < count and groups[end] == groups[end - 1]:
            end += 1
        runs.append((start, end))
        start = end
    return runs


def _count_here(cache, cache_name, spans, options, hand_over, taken=None, between=None) -> bool:
    """Counts the parts at `spans` (in group order; an array("q") or its
    bytes), a run of whole groups at a time (every run, or those it takes
    where `taken` counts the runs the processes took: TakenItems), and
    hands finished jobs' parts to `hand_over` once there are
    JOBS_PER_HAND_OVER and at the end; `between()` runs after each run;
    False, at the first part that is missing, in a log that is gone or not
    as its CRC says."""
    # A view, not a copy: every process holds all the parts' places.
    places = spans if isinstance(spans, array) else memoryview(spans).cast("q")
    totals = FleetTotals(*options)
    logs: Dict[int, Optional[int]] = {}
    runs = _runs_of(places)
    try:
        open_log = partial(cache.open_log, cache_name)
        for start, end in runs if taken is None else TakenItems(runs, taken):
            if load_parts is None:
                whole = _count_in_python(cache, cache_name, places, start, end, totals, logs)
                if not whole:
                    return False
            else:
                # Note [Loading a run of parts in compiled code],
                # record_decoding.cpp: the run's jobs are then whole.
                loaded = load_parts(places, start, end, logs, open_log, RecordFields)
                if loaded is None:
                    return False
                totals.add_all(loaded)
                del loaded
            if len(totals.jobs) >= JOBS_PER_HAND_OVER:
                hand_over(finished_jobs(totals))
            if between is not None:
                between()
        hand_over(finished_jobs(totals))
        return True
    finally:
        for fd in logs.values():
            if fd is not None:
                os.close(fd)


def _count_in_python(cache, cache_name, places, start, end, totals, logs) -> bool:
    """Counts the parts of triples [start, end) of `places` into `totals`,
    as load_parts and add_all do in compiled code."""
    loads, crc32, pread = marshal.loads, zlib.crc32, os.pread
    # RecordFields._make without its frame: a part is a tuple of the fields.
    new, fields_type = tuple.__new__, RecordFields
    add = totals.add
    log = fd = None
    triples = iter(places[3 * start : 3 * end])
    for _, place, span in zip(triples, triples, triples):
        if place >> 32 != log:
            if not place:
                return False
            log = place >> 32
            if log not in logs:
                logs[log] = cache.open_log(cache_name, log)
            fd = logs[log]
            if fd is None:
                return False
        length = span & _LENGTH
        part = pread(fd, length, span >> SPAN_LENGTH_BITS)
        if len(part) != length or crc32(part) != place & 0xFFFFFFFF:
            return False
        add(new(fields_type, loads(part)))
    return True


_LENGTH = (1 << SPAN_LENGTH_BITS) - 1

# Note [The logs are read, not mapped]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A counting process reads its jobs' parts from every log, a job's parts
# scattered over them. Through a mapping, each part read maps its page's
# whole folio of the page cache into the process (the kernel maps pages
# around a fault, and a file's cache comes in large folios), which then
# counts as the process's memory: each counting process held nearly all of
# every log (about 125 MB at 10^6 records), and giving pages back with
# madvise(MADV_DONTNEED) every 64 jobs did not keep it down. So each part
# is read with os.pread: the kernel's page cache holds the logs, and a
# counting process holds one part at a time.


def _count_part(cache, cache_name, options, taken, inbox, out) -> None:
    """A counting process: _count_here of the runs it takes (`taken`) of
    the parts it is sent (`inbox`, a pipe's ends: nothing, none), each
    hand-over through marshal
    (Note [Reading a fleet in parallel])."""
    try:
        spans = inbox[0].recv_bytes()
        if spans and not _count_here(
            cache,
            cache_name,
            spans,
            options,
            lambda jobs: out.put(("jobs", marshal.dumps(jobs), 0)),
            taken,
        ):
            out.put(("broken", None, 0))
        out.put(("done", None, 0))
    except BaseException as e:  # noqa: B036 -- the parent reports it
        out.put(("failed", f"{type(e).__name__}: {e}", 0))


# Note [A re-run reads the jobs that changed]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# With the cache, the report lists the directory and compares each file's
# key with the index (Note [The files' index], file_index.py): a file whose
# key is unchanged gave the same part last time. A job's part of the report
# is made from its records alone (Note [A job's part of the report],
# fleet_totals.py), so a job none of whose files changed, came or went keeps
# its part, and its JSON line. The others (the groups of the changed
# entries and of the files read anew) are counted again: the changed files
# read, and every record of those jobs counted from its part (Note
# [Counting from the parts, job by job]), the unchanged ones' parts kept
# from the runs before (Note [A record's part, kept], report_cache.py).
# Where a part cannot be used, the report starts again from the files
# alone. So a re-run costs a stat per file, a fresh read per changed file,
# and a count per record of a changed job.
def summarize_directory(*args, **kwargs) -> dict:
    """The report of a directory (assemble_directory's arguments), as
    plain values: {"jobs": {job: summary}, "releases": {torch: counts},
    "skipped": {reason: n}, "filtered": n}."""
    return assemble_directory(*args, **kwargs).report()


def assemble_directory(
    directory: str,
    since: Optional[str] = None,
    until: Optional[str] = None,
    jobs: Optional[List[str]] = None,
    workers: int = 1,
    progress: Optional[bool] = False,
    by_placement: bool = False,
    cache: Optional[ReportCache] = None,
) -> Assembled:
    """The report of `directory` (fleet_totals.Assembled), read by `workers`
    processes (Note [Reading a fleet in parallel]); progress on stderr when
    `progress` is true, or None and stderr is a terminal; the threading cost
    per class and placement with `by_placement`; with `cache`, only the jobs
    that changed are read (Note [A re-run reads the jobs that changed]), and
    its `problems` list what it met. Streams: memory grows with the jobs and
    ranks, not with the records."""
    options = (since, until, sorted(set(jobs)) if jobs else None, by_placement)
    shown = _Progress(directory, progress)
    # Note [No garbage collection while reading]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Reading makes no reference cycle (records are dicts, lists and
    # strings; a caught exception is unbound when its handler ends), and the
    # cycle collector's passes over the growing counts cost a tenth of the
    # report's time on a large fleet. So it is off while reading, here and in
    # the reading processes, which fork with it off, and back as it was after.
    collecting = gc.isenabled()
    gc.disable()
    try:
        assembled = None
        if cache is not None:
            assembled = _assemble(directory, options, workers, shown, cache, True)
            if assembled is None:
                # Note [Counting from the parts, job by job]
                cache.problems.append(
                    f"ignoring the records' parts in the report's cache {cache.folder}: "
                    "a log is gone or corrupt; reading every record again"
                )
                assembled = _assemble(directory, options, workers, shown, cache, False)
        if assembled is None:
            assembled = _assemble(directory, options, workers, shown, None, False)
        return assembled
    finally:
        if collecting:
            gc.enable()
        shown.close()
        if cache is not None:
            cache.close()


# Note [Loading the cache while listing]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Listing a directory of 10^6 files (compiled, in a thread of its own) and
# loading the cache's index and parts (in Python, 130 MB at 10^6 records)
# take about a third of a second each and need nothing of each other: so
# this thread loads while another lists, and the index's keys are checked
# as soon as it is loaded, while the listing may still run (Note [The keys
# are checked while listing], file_index.cpp). The threads are joined
# before any process is forked.
def _list_and_load(directory_fd: int, cache, cache_name, options, totals: FleetTotals):
    """(the names to read, "/"-ended; which of the index's entries are
    unchanged; the cache's index names, keys, reasons and kept jobs, empty
    where there is no cache or its parts are not worth keeping)."""
    loaded: list = []

    def load():
        if cache is None:
            return None
        state = cache.load(options)
        if state is None:
            return None
        names, keys, reasons, kept = state
        if type(keys) is not array:
            keys = array("q", bytes(keys))
        # The file's bytes go with the last view of them.
        state = None
        if not cache.parts_worth_keeping(cache_name, *part_logs_of(names, keys, None)):
            # Note [A record's part, kept]: read afresh, new logs.
            return None
        loaded.append((names, keys, reasons, kept))
        return names, keys

    listed, unchanged = scan_and_check(directory_fd, load, totals.skipped)
    if not loaded:
        return listed, bytearray(), b"", array("q"), {}, {}
    return (listed, unchanged, *loaded[0])


def _assemble(directory, options, workers, shown, cache, use_index) -> Optional[Assembled]:
    """assemble_directory's report, with the cache's index where
    `use_index`; None where a record's part could not be counted (Note
    [Counting from the parts, job by job])."""
    totals = FleetTotals(*options)
    directory_fd = writer = logs = counters = None
    try:
        started = time.time()
        if cache is not None and workers > 1:
            counters = _Counters(cache, cache.name_of(options), options, workers - 1)
        cache_name = None if cache is None else cache.name_of(options)
        directory_fd = open_directory(directory)
        listed, unchanged, names, keys, reasons, kept = _list_and_load(
            directory_fd, cache if use_index else None, cache_name, options, totals
        )
        touched = set()
        # Files skipped as the index says, which the progress counts as
        # unchanged.
        kept_skips = Counter()
        if names:
            try:
                touched = changed_groups_of(names, keys, unchanged, reasons, kept_skips)
            except ValueError:
                cache.problems.append(
                    f"ignoring the report's cache in {cache.folder}: corrupt; rebuilding it"
                )
                names, keys, reasons, kept = b"", array("q"), {}, {}
                kept_skips.clear()
                totals.skipped.clear()
                listed, unchanged = scan(directory_fd, None, totals.skipped)
        sink = None
        if cache is not None:
            # Note [The cache's changes]: a re-run that reads few files
            # writes what changed.
            rereading = listed.count(b"/") if names else None
            sink = _IndexSink(cache.writer(options, rereading), bool(names))
            writer = sink.writer
            if writer is not None:
                logs = _Logs(cache, cache_name)
        todo = [listed]
        del listed
        _read(directory, directory_fd, todo, workers, totals, sink, shown, logs)
        as_they_were = None
        if logs is None:
            results = {job: kept_job(job, result) for job, result in totals.results().items()}
        else:
            as_they_were = {}
            # Every part in its log before it is counted.
            logs.close()
            spans = sink.spans
            sink.spans = None
            if names:
                touched |= sink.touched
                spans.extend(spans_of(names, keys, unchanged, touched))
            group_ordered(spans)
            todo = [spans]
            del spans
            # Note [The jobs kept are found while the others count]
            # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
            # Which of the cache's jobs are kept as they were takes a pass
            # over every job (Note [A job's group is kept with its part]),
            # and needs only the groups touched: every job counted again is
            # of a touched group. So this process finds them once the
            # counting processes have the parts, and they take the runs it
            # has not (Note [Each chunk is read by the first process to take
            # it]).
            # The logs the unchanged entries name, which the cache's next
            # state keeps: also needed only once every job is counted.
            named: set = set()

            def meanwhile() -> None:
                as_they_were.update(_kept_as_they_were(kept, touched))
                if names:
                    named.update(part_logs_of(names, keys, unchanged)[0])

            results = _count_parts(cache, cache_name, todo, options, counters, meanwhile)
            if results is None:
                cache.remove_logs(cache_name, logs.made, set(), started)
                return None
        # The jobs counted now (Note [The jobs whose parts are new],
        # report_cache.py).
        counted = results
        if as_they_were is None:
            as_they_were = _kept_as_they_were(kept, touched)
        # Note [The cache keeps the jobs in name order], report_cache.py:
        # the jobs kept first, as the cache holds them; a job counted again
        # takes the place of its part kept.
        as_they_were.update(results)
        results = as_they_were
        assembled = Assembled(results, totals.skipped + kept_skips, totals.wanted)
        # The reading counted the records; the rest is counted here.
        shown.update(unchanged.count(1) + sum(totals.skipped.values()))
        if writer is not None:
            if names and not sink.entries and unchanged.count(0) == 0:
                # Nothing changed: the file in place says it all.
                writer.abandon()
                cache.remove_logs(cache_name, logs.made, set(), started)
            else:
                named |= logs.made
                if names:
                    writer.carry(names, keys, unchanged)
                del names, keys, unchanged
                reasons.update(sink.reasons)
                jobs = assembled.kept()
                writer.finish(reasons, jobs, chain(counted, assembled.relined))
                if not writer.failed:
                    cache.remove_logs(cache_name, None, named, started)
            writer = None
        return assembled
    finally:
        if writer is not None:
            writer.abandon()
        if logs is not None:
            logs.close()
        if counters is not None:
            counters.close()
        if directory_fd is not None:
            os.close(directory_fd)


# Jobs written at a time: their lines are in memory together.
JOBS_PER_WRITE = 1024


def write_json(report, out) -> None:
    """`report` (a dict, or an Assembled) as JSON on `out`, its keys sorted
    and each job on a line of its own: a job's summary and each other field
    come whole from json's encoder (its C one, which does not indent), so
    the text of a million processes' report is never whole in memory, and
    writing it takes a fraction of the time of json.dump(indent=...). An
    Assembled gives each job's line as the cache kept it where its part did
    not change."""
    encode = json.JSONEncoder(sort_keys=True).encode
    if isinstance(report, Assembled):
        fields = dict(report.fields)
        jobs, made = report.rows()

        def lines_of(start: int, end: int) -> List[str]:
            return made[start:end]

    else:
        fields = {name: value for name, value in report.items() if name != "jobs"}
        summaries = report["jobs"]
        jobs = sorted(summaries)

        def lines_of(start: int, end: int) -> List[str]:
            return [encode(summaries[job]) for job in jobs[start:end]]

    fields["jobs"] = None
    names = sorted(fields)
    # The encoder's own encoding of a str (keys are ASCII-escaped).
    name_of = json.encoder.encode_basestring_ascii
    out.write("{\n")
    for i, name in enumerate(names):
        if name == "jobs":
            out.write(f"  {encode(name)}: {{\n")
            # A write per JOBS_PER_WRITE jobs, each row joined in C: no
            # str formatted per job.
            for start in range(0, len(jobs), JOBS_PER_WRITE):
                end = start + JOBS_PER_WRITE
                rows = ",\n    ".join(
                    map(": ".join, zip(map(name_of, jobs[start:end]), lines_of(start, end)))
                )
                # The last job's line without its comma.
                out.write(f"    {rows}{',' if end < len(jobs) else ''}\n")
            out.write("  }")
        else:
            out.write(f"  {encode(name)}: {encode(fields[name])}")
        out.write(",\n" if i + 1 < len(names) else "\n")
    out.write("}\n")


def main(argv=None, prog=None, end_process: bool = False) -> int:
    """The report; its exit status (module docstring). A closed stdout (the
    report piped into `head`) ends it quietly. With `end_process` (the
    command lines), a report written ends the process at once (Note [The
    command ends once the report is out])."""
    # Note [The garbage is collected once the report is gone]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # assemble_directory collects no garbage while it reads (Note [No
    # garbage collection while reading]) and turns collecting back on as it
    # was. Turned on under a report it has just made, the first collection
    # walks every object the report holds, all of them young (0.16 s at 10^6
    # records, with nothing to find: a report makes no cycle). So the
    # command line keeps it off until the report has been written and let
    # go (reference counting frees it as _main returns): then there is
    # little left to walk.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv, prog, end_process)
    except BrokenPipeError:
        # Note [A closed pipe ends the report quietly]
        # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
        # `report DIR | head -1` closes the pipe while the report writes: the
        # reader has what it wanted, so no traceback and no line (as a shell
        # tool killed by SIGPIPE prints none), and status 1 (the output is
        # incomplete). stdout goes to /dev/null first, so that the
        # interpreter's flush at exit meets no closed pipe either (the
        # recipe of Python's signal module's documentation).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    finally:
        if collecting:
            gc.enable()


def command() -> int:
    """The console script: main() of sys.argv, ending the process once the
    report is out (Note [The command ends once the report is out])."""
    return main(end_process=True)


# Note [The command ends once the report is out]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A report of 10^6 records holds some two million small objects: each job's
# part and line, the cache's index. Freed one by one as _main returns, and
# what is left walked by the interpreter's exit, they cost 0.1 s of a 2 s
# re-run, after the report is written and the cache too, and nothing needs
# them any more. So the command lines (the launcher's `report` and the
# console script) end the process there, as os._exit does, once stdout and
# stderr are flushed; the kernel takes the memory back whole. No exit
# handler is skipped that matters: the report imports neither torch nor the
# library, every process it started has been joined, and every file it
# wrote is closed. main() called from Python returns, as any function.
def _ended(status: int, end_process: bool) -> int:
    """`status`, or the process ended with it where `end_process` (Note
    [The command ends once the report is out]); a closed stdout raises
    BrokenPipeError as any write to it."""
    if end_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _main(argv, prog, end_process: bool) -> int:
    parser = make_parser(prog, __doc__)
    args = parser.parse_args(argv)
    if not os.path.isdir(args.directory):
        print(f"{parser.prog}: {args.directory!r} is not a directory", file=sys.stderr)
        return 2
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.prometheus and args.by_placement:
        parser.error("--prometheus counts per class: leave out --by-placement")
    cache = None
    if args.cache_dir is not None and inside(args.cache_dir, args.directory):
        parser.error("--cache-dir must not be in DIR: others may write there")
    if not args.no_cache:
        cache = ReportCache(args.directory, args.cache_dir)
        if inside(cache.root, args.directory):
            print(
                f"{parser.prog}: not using the report's cache {cache.root}: it is in DIR, "
                "where others may write (name another with --cache-dir)",
                file=sys.stderr,
            )
            cache = None
    try:
        assembled = assemble_directory(
            args.directory,
            args.since,
            args.until,
            args.job,
            args.workers,
            progress=False if args.json else None,
            by_placement=args.by_placement,
            cache=cache,
        )
    except (RuntimeError, OSError) as e:  # a reading process died; DIR went away
        print(f"{parser.prog}: could not read {args.directory}: {e}", file=sys.stderr)
        return 1
    if cache is not None and cache.problems:
        more = len(cache.problems) - 1
        print(
            f"{parser.prog}: {cache.problems[0]}" + (f" (and {more} more)" if more else ""),
            file=sys.stderr,
        )
    if not assembled.order:
        skipped = sum(assembled.fields["skipped"].values()) + assembled.fields["filtered"]
        print(
            f"{parser.prog}: no records to report in {args.directory}"
            + (f" ({skipped} files skipped or filtered out)" if skipped else ""),
            file=sys.stderr,
        )
        return 1
    # Each job's summary is decoded only for what needs them all.
    report = None
    if args.json:
        write_json(assembled, sys.stdout)
    else:
        report = assembled.report()
        width = table_width() if args.width is None else (args.width or None)
        print(format_table(report, args.all_jobs, args.top, width))
    sys.stdout.flush()
    if report is None and (args.prometheus or args.plot):
        report = assembled.report()
    if args.prometheus:
        from .metric_families import fleet_samples, write_prometheus_file

        try:
            write_prometheus_file(fleet_samples(report, ALL_JOBS), args.prometheus)
        except OSError as e:
            print(
                f"{parser.prog}: could not write --prometheus {args.prometheus}: {e}",
                file=sys.stderr,
            )
            return 1
        print(
            f"{parser.prog}: wrote the counts to {os.path.abspath(args.prometheus)}",
            file=sys.stderr,
        )
    if args.plot:
        from .report_plot import plot

        try:
            plot(report, args.plot)
        except OSError as e:
            print(f"{parser.prog}: could not write --plot {args.plot}: {e}", file=sys.stderr)
            return 1
        print(f"{parser.prog}: wrote the plot to {os.path.abspath(args.plot)}", file=sys.stderr)
    # `assembled` and `report` are let go only as the process ends.
    return _ended(0, end_process)


if __name__ == "__main__":
    sys.exit(command())
