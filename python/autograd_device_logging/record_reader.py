"""Reading the records of a shared directory: each file opened without
following a link or waiting, then decoded and checked (record_decoder.py),
or its part taken from the report's cache when the file is unchanged
(report_cache.py)."""

from __future__ import annotations

import errno
import operator
import os
import stat
import zlib
from collections import Counter
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple

from .record_decoder import decode
from .record_fields import Record, RecordFields, Skip
from .report_cache import SHARDS, Entries, Key, ReportCache

try:
    from ._record_files import read_files
except ImportError:  # Note [Reading the files in compiled code]
    read_files = None

# A record is about a kilobyte (a few more with the threading cost's pairs);
# anything far larger is not one.
MAX_RECORD_BYTES = 1 << 20


_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def is_record_name(name: str) -> bool:
    return name.endswith(".json") and not name.startswith(".")


def read_record(path, dir_fd: Optional[int], buffer: bytearray) -> Tuple[Record, Key]:
    """The record in the file at `path` (relative to the directory `dir_fd`,
    or to the working directory for None), read into `buffer` (a bytearray of
    MAX_RECORD_BYTES + 1, reused across calls), and the file's key as it was
    opened (Note [The report's cache], report_cache.py); raises Skip (whose
    args[1] is the key, where the file was opened), OSError for a file it
    could not read, or ValueError or RecursionError (with the key as
    `.key`) for one that is not JSON.

    The directory is shared (any user may add entries), so nothing in it is
    followed or waited on: the open() does not follow a symbolic link and does
    not block (a FIFO would block until a writer came), and what it opened is
    read only when it is a regular file, whether the listing said so (then
    read_records skips the others first) or another entry replaced the file
    after the listing."""
    try:
        fd = os.open(path, _FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Skip("symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            # A FIFO or device that replaced the file after the listing.
            raise Skip("not a regular file")
        size = os.readv(fd, [buffer])
    finally:
        os.close(fd)
    key = (st.st_size, st.st_mtime_ns, st.st_ino)
    if size > MAX_RECORD_BYTES:
        raise Skip("too large", key)
    with memoryview(buffer) as view:
        try:
            return decode(view[:size]), key
        except Skip as e:
            raise Skip(e.args[0], key) from None
        except (ValueError, RecursionError) as e:
            e.key = key
            raise


def read_records(
    directory: str,
    skipped: Counter,
    shards: Optional[FrozenSet[int]] = None,
    cache: Optional[ReportCache] = None,
) -> Iterator[Record]:
    """The records of `directory`, one at a time; what is not one is counted
    in `skipped` by reason. Only the files of `shards` (shard_of their
    name; None: all), so that processes reading concurrently share no file
    even while the directory changes. With a `cache`, a file whose key it
    holds is not read again (Note [The report's cache]); a cached record
    comes as a RecordFields."""
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        yield from _read_listed(directory_fd, skipped, shards, cache)
    finally:
        os.close(directory_fd)


# A Record as the cache keeps it: a plain tuple of its fields.
as_fields = operator.attrgetter(*Record.__slots__)


def _read_listed(
    directory_fd: int,
    skipped: Counter,
    shards: Optional[FrozenSet[int]],
    cache: Optional[ReportCache],
) -> Iterator[Record]:
    # Each file is opened relative to the directory's descriptor: no path is
    # resolved again, and a directory renamed meanwhile is still this one.
    # The names are listed first, by shard, so that one shard's cache at a
    # time is in memory; each shard's names are kept as bytes, each followed
    # by a "/" (which no name holds): a million names in 30 MB, not 100.
    names: Dict[int, bytearray] = {
        shard: bytearray() for shard in (range(SHARDS) if shards is None else sorted(shards))
    }
    with os.scandir(directory_fd) as entries:
        for entry in entries:
            name = entry.name
            if not is_record_name(name):
                continue
            encoded = name.encode("utf-8", "surrogateescape")
            listed = names.get(shard_of(encoded))
            if listed is None:
                continue
            if entry.is_symlink():
                skipped["symbolic link"] += 1
            elif not entry.is_file(follow_symlinks=False):
                skipped["not a regular file"] += 1
            else:
                listed += encoded
                listed += b"/"
    buffer = bytearray(MAX_RECORD_BYTES + 1)
    for shard in list(names):
        listed = bytes(names.pop(shard)).split(b"/")
        listed.pop()
        yield from _read_shard(directory_fd, shard, listed, skipped, cache, buffer)


# Names read_files takes at a time: their files' bytes are held at once.
CHUNK = 1000


# Note [Reading the files in compiled code]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Opening, checking and reading a small file costs the kernel about 5 us,
# and Python's os.open, os.fstat, os.readv and os.close, with the objects
# they make and the exceptions that carry a skip, about 3 us more. So where the
# package was built (python/csrc/record_files.cpp, which needs only Python's
# headers), _record_files.read_files does for CHUNK names at a time what
# read_record and the cache's check below do, in one call: the same flags
# (no link followed, no FIFO waited on), the same key (st_size,
# st_mtime_ns, st_ino) from the same stat, the same reasons for a file it
# does not read. Only the decoding stays in Python. Without the extension
# (the source tree) the Python path reads every file: the same report.
# test_report_cache.py (TestCompiledFileReading) holds the two to each
# other on directories of every kind of entry, cached and not.
def _read_shard(
    directory_fd: int,
    shard: int,
    names: List[bytes],
    skipped: Counter,
    cache: Optional[ReportCache],
    buffer: bytearray,
) -> Iterator[Record]:
    held: Entries = {} if cache is None else cache.load(shard)
    if read_files is not None:
        yield from _read_shard_compiled(directory_fd, shard, names, skipped, cache, held)
        return
    holds: Entries = {}
    changed = False
    make = RecordFields._make
    for name in names:
        try:
            old = held.get(name) if held else None
            if old is not None:
                st = os.lstat(name, dir_fd=directory_fd)
                key, part = old
                if key == (st.st_size, st.st_mtime_ns, st.st_ino) and stat.S_ISREG(st.st_mode):
                    holds[name] = old
                    if type(part) is str:
                        skipped[part] += 1
                    else:
                        yield make(part)
                    continue
            changed = True
            try:
                record, key = read_record(name, directory_fd, buffer)
            except Skip as e:
                if len(e.args) > 1:
                    holds[name] = (e.args[1], e.args[0])
                raise
            except (ValueError, RecursionError) as e:
                if hasattr(e, "key"):
                    holds[name] = (e.key, "malformed: not JSON")
                raise
            if cache is not None:
                holds[name] = (key, as_fields(record))
            yield record
        except Skip as e:
            skipped[e.args[0]] += 1
        except (ValueError, RecursionError):
            # Not UTF-8, not JSON, or nested too deep.
            skipped["malformed: not JSON"] += 1
        except OSError:
            # The file could not be read: no permission, or gone. Not
            # kept: the next run tries again.
            skipped["unreadable"] += 1
    if cache is not None and (changed or len(holds) != len(held)):
        cache.save(shard, holds)


def _read_shard_compiled(
    directory_fd: int,
    shard: int,
    names: List[bytes],
    skipped: Counter,
    cache: Optional[ReportCache],
    held: Entries,
) -> Iterator[Record]:
    """_read_shard's work, the files read by read_files (Note [Reading the
    files in compiled code])."""
    holds: Entries = {}
    changed = False
    make = RecordFields._make
    keep = cache is not None
    for start in range(0, len(names), CHUNK):
        chunk = names[start : start + CHUNK]
        outcomes, reused = read_files(directory_fd, chunk, held or None, MAX_RECORD_BYTES)
        changed = changed or reused != len(chunk)
        for name, outcome in zip(chunk, outcomes):
            key, what = outcome
            kind = type(what)
            if kind is bytes:
                try:
                    record = decode(what)
                except Skip as e:
                    what = e.args[0]
                except (ValueError, RecursionError):
                    # Not UTF-8, not JSON, or nested too deep.
                    what = "malformed: not JSON"
                else:
                    if keep:
                        holds[name] = (key, as_fields(record))
                    yield record
                    continue
                skipped[what] += 1
                if keep:
                    holds[name] = (key, what)
            elif kind is str:
                skipped[what] += 1
                if keep and key is not None:
                    holds[name] = outcome
            else:
                # Unchanged: its part as the cache holds it.
                holds[name] = outcome
                yield make(what)
    if keep and (changed or len(holds) != len(held)):
        cache.save(shard, holds)


def shard_of(name: bytes) -> int:
    """The shard of a file's name, as bytes (Note [The report's cache]): the
    same in every process."""
    return zlib.crc32(name) % SHARDS
