"""Reading the records of a shared directory: each file opened without
following a link or waiting, then decoded and checked (record_decoder.py)."""

from __future__ import annotations

import errno
import os
import zlib
from collections import Counter
from typing import FrozenSet, Iterator, Optional, Tuple

from .record_decoder import decode
from .record_fields import Record, Skip

# A record is about a kilobyte (a few more with the threading cost's pairs);
# anything far larger is not one.
MAX_RECORD_BYTES = 1 << 20


_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def is_record_name(name: str) -> bool:
    return name.endswith(".json") and not name.startswith(".")


def read_record(path: str, dir_fd: Optional[int], buffer: bytearray) -> Record:
    """The record in the file at `path` (relative to the directory `dir_fd`,
    or to the working directory for None), read into `buffer` (a bytearray of
    MAX_RECORD_BYTES + 1, reused across calls); raises Skip, OSError for a
    file it could not read, or ValueError or RecursionError for one that is
    not JSON.

    The directory is shared (any user may add entries), so nothing in it is
    followed or waited on: the open() does not follow a symbolic link and does
    not block, so a FIFO (which would block until a writer came) reads as
    empty, and a directory fails to read, whether it was listed as one (then
    read_records skips it first) or replaced the file after the listing."""
    try:
        fd = os.open(path, _FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Skip("symbolic link") from None
        raise
    try:
        size = os.readv(fd, [buffer])
    finally:
        os.close(fd)
    if size > MAX_RECORD_BYTES:
        raise Skip("too large")
    with memoryview(buffer) as view:
        return decode(view[:size])


def read_records(
    directory: str, skipped: Counter, part: Tuple[FrozenSet[int], int] = (frozenset({0}), 1)
) -> Iterator[Record]:
    """The records of `directory`, one at a time; what is not one is counted
    in `skipped` by reason. `part` = (buckets, n) reads only the files whose
    name hashes, modulo n, into `buckets` (so that parts read concurrently
    share no file even while the directory changes)."""
    buckets, parts = part
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        yield from _read_listed(directory_fd, skipped, buckets, parts)
    finally:
        os.close(directory_fd)


def _read_listed(
    directory_fd: int, skipped: Counter, buckets: FrozenSet[int], parts: int
) -> Iterator[Record]:
    # Each file is opened relative to the directory's descriptor: no path is
    # resolved again, and a directory renamed meanwhile is still this one.
    buffer = bytearray(MAX_RECORD_BYTES + 1)
    with os.scandir(directory_fd) as entries:
        for entry in entries:
            name = entry.name
            if not is_record_name(name):
                continue
            if parts > 1 and hash_of(name) % parts not in buckets:
                continue
            try:
                if entry.is_symlink():
                    raise Skip("symbolic link")
                if not entry.is_file(follow_symlinks=False):
                    raise Skip("not a regular file")
                yield read_record(name, directory_fd, buffer)
            except Skip as e:
                skipped[e.args[0]] += 1
            except (ValueError, RecursionError):
                # Not UTF-8, not JSON, or nested too deep.
                skipped["malformed: not JSON"] += 1
            except OSError:
                # The file could not be read: no permission, or gone.
                skipped["unreadable"] += 1


def hash_of(name: str) -> int:
    """A hash of a file's name that is the same in every process."""
    return zlib.crc32(name.encode("utf-8", "surrogateescape"))
