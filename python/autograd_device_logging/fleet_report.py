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
from collections import Counter
from typing import FrozenSet, List, Optional

from .fleet_report_options import make_parser, table_width
from .fleet_totals import ALL_JOBS, FleetTotals
from .record_reader import is_record_name, read_records
from .report_cache import SHARDS, ReportCache, inside
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


def _read_part(directory: str, shards, cache, options, out) -> None:
    """A reading process: counts the records of its shards of `directory`
    into totals of its own (Note [Reading a fleet in parallel]), saying how
    many files it read every BATCH, then hands the totals over with what it
    met in the cache."""
    try:
        totals = FleetTotals(*options)
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

        _read_here(directory, totals, shards, cache, between)
        hand_over()
        out.put(("done", [] if cache is None else cache.problems, 0))
    except BaseException as e:  # noqa: B036 -- the parent reports it
        out.put(("failed", f"{type(e).__name__}: {e}", 0))


# Note [Reading a fleet in parallel]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Reading, checking and counting a record costs the same in any process, so
# the report reads with a process per core (at most
# fleet_report_options.MAX_WORKERS): this one and the reading processes it
# forks. Each lists the directory itself and reads the files of its shards
# (report_cache.SHARDS, by the hash of the name), so no file is read twice
# even while jobs add records, and no name is sent from one process to
# another; each keeps its shards' cache. Each counts what it reads into
# FleetTotals of its own and, every HAND_OVER records and at the end, hands
# them over to this process as plain values (FleetTotals.drain, through
# marshal), which adds them to its own (FleetTotals.take): every count is a
# sum, a union or a rule on the records themselves (Note [A restarted rank
# counts once, under its newest release], fleet_totals.py), so the report
# does not depend on which process read what, nor on when counts were handed
# over. No record crosses from one process to another: sending each and
# counting every one in this process made it the slowest of them. Handing
# over as it goes keeps a reading process's counts small, so that the
# counts are held about once, as by a single process (the memory target).
# Nothing waits without a limit: a reading process that dies (killed, out of
# memory) fails the report with a message instead of leaving it waiting for
# counts that never come.
def _read_here(directory: str, totals: FleetTotals, shards, cache, between) -> None:
    """Reads `shards` of `directory` into `totals` in this process;
    `between(files)` runs after each BATCH files with how many were read."""
    seen = 0
    for seen, record in enumerate(read_records(directory, totals.skipped, shards, cache), 1):
        totals.add(record)
        if seen % BATCH == 0:
            between(BATCH)
    between(seen % BATCH)


def shards_of(workers: int) -> List[FrozenSet[int]]:
    """The shards that `workers` processes read (read_records' `shards`),
    this process's first: as even a share as SHARDS allows."""
    return [frozenset(range(i, SHARDS, workers)) for i in range(workers)]


class _Readers:
    """The reading processes, and taking what they hand over."""

    def __init__(self, directory: str, workers: int, totals: FleetTotals, cache, progress):
        import multiprocessing

        methods = multiprocessing.get_all_start_methods()
        # Forking is safe: the report imports neither torch nor the library,
        # and starts no thread before the reading processes.
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        self.totals, self.progress = totals, progress
        self.out = context.Queue()
        options = (totals.since, totals.until, totals.wanted, totals.by_placement)
        self.processes = [
            context.Process(
                target=_read_part,
                args=(directory, shards, cache, options, self.out),
                daemon=True,
            )
            for shards in shards_of(workers)[1:]
        ]
        self.running = len(self.processes)
        # What the reading processes met in the cache.
        self.problems: List[str] = []
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
            elif kind == "done":
                self.problems += payload
                self.running -= 1
            else:
                raise RuntimeError(f"a reading process failed: {payload}")

    def close(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
            process.join()


def summarize_directory(
    directory: str,
    since: Optional[str] = None,
    until: Optional[str] = None,
    jobs: Optional[List[str]] = None,
    workers: int = 1,
    progress: Optional[bool] = False,
    by_placement: bool = False,
    cache: Optional[ReportCache] = None,
) -> dict:
    """The report of `directory` (FleetTotals.report), read by `workers`
    processes (Note [Reading a fleet in parallel]); progress on stderr when
    `progress` is true, or None and stderr is a terminal; the threading cost
    per class and placement with `by_placement`; unchanged files' parts from
    `cache` (Note [The report's cache]), whose `problems` then list what it
    met. Streams: memory grows with the jobs and ranks, not with the
    records."""
    totals = FleetTotals(since, until, jobs, by_placement)
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
        if workers > 1:
            readers = _Readers(directory, workers, totals, cache, shown)
            try:

                def between(files: int) -> None:
                    shown.update(files)
                    readers.take(False)

                _read_here(directory, totals, shards_of(workers)[0], cache, between)
                readers.take(True)
            finally:
                readers.close()
            if cache is not None:
                cache.problems += readers.problems
        else:
            _read_here(directory, totals, None, cache, shown.update)
        shown.update(sum(totals.skipped.values()))
    finally:
        if collecting:
            gc.enable()
        shown.close()
        if cache is not None:
            cache.close()
    return totals.report()


def write_json(report: dict, out) -> None:
    """`report` as JSON on `out`, its keys sorted and each job on a line of
    its own: a job's summary and each other field come whole from json's
    encoder (its C one, which does not indent), so the text of a million
    processes' report is never whole in memory, and writing it takes a
    fraction of the time of json.dump(indent=...)."""
    encode = json.JSONEncoder(sort_keys=True).encode
    fields = sorted(report.items())
    out.write("{\n")
    for i, (name, value) in enumerate(fields):
        if name == "jobs":
            out.write(f"  {encode(name)}: {{\n")
            jobs = sorted(value.items())
            for j, (job, summary) in enumerate(jobs):
                comma = "," if j + 1 < len(jobs) else ""
                out.write(f"    {encode(job)}: {encode(summary)}{comma}\n")
            out.write("  }")
        else:
            out.write(f"  {encode(name)}: {encode(value)}")
        out.write(",\n" if i + 1 < len(fields) else "\n")
    out.write("}\n")


def main(argv=None, prog=None) -> int:
    """The report; its exit status (module docstring). A closed stdout (the
    report piped into `head`) ends it quietly."""
    try:
        return _main(argv, prog)
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


def _main(argv, prog) -> int:
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
        report = summarize_directory(
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
    if not report["jobs"]:
        skipped = sum(report["skipped"].values()) + report["filtered"]
        print(
            f"{parser.prog}: no records to report in {args.directory}"
            + (f" ({skipped} files skipped or filtered out)" if skipped else ""),
            file=sys.stderr,
        )
        return 1
    if args.json:
        write_json(report, sys.stdout)
    else:
        width = table_width() if args.width is None else (args.width or None)
        print(format_table(report, args.all_jobs, args.top, width))
    sys.stdout.flush()
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
