"""Reading the records of a shared directory: each file opened without
following a link or waiting, then decoded and checked (record_decoder.py);
with the report's cache (report_cache.py), only the files whose key
changed (file_index.py)."""

from __future__ import annotations

import errno
import os
import stat
from collections import Counter
from typing import Iterator, List, Optional, Tuple

from .file_index import IndexEntries, Key, is_record_name, read_files, scan, without_parts
from .record_decoder import decode, decode_fields, keep_records
from .record_fields import Record, Skip

__all__ = ["is_record_name", "open_directory", "read_named", "read_record", "read_records"]

# A record is about a kilobyte (a few more with the threading cost's pairs);
# anything far larger is not one.
MAX_RECORD_BYTES = 1 << 20


_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def read_record(
    path, dir_fd: Optional[int], buffer: bytearray, decoding=decode
) -> Tuple[Record, Key]:
    """The record in the file at `path` (relative to the directory `dir_fd`,
    or to the working directory for None), read into `buffer` (a bytearray of
    MAX_RECORD_BYTES + 1, reused across calls) and decoded by `decoding`
    (decode, or decode_fields for its fields), and the file's key as it was
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
            return decoding(view[:size]), key
        except Skip as e:
            raise Skip(e.args[0], key) from None
        except (ValueError, RecursionError) as e:
            e.key = key
            raise


def read_records(directory: str, skipped: Counter) -> Iterator[Record]:
    """The records of `directory`, one at a time; what is not one is counted
    in `skipped` by reason."""
    directory_fd = open_directory(directory)
    try:
        listed = scan(directory_fd, None, skipped)[0]
        yield from read_named(directory_fd, listed, skipped, None)
    finally:
        os.close(directory_fd)


def open_directory(directory: str) -> int:
    # Each file is opened relative to the directory's descriptor: no path is
    # resolved again, and a directory renamed meanwhile is still this one.
    return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))


# Names read_files takes at a time: their files' bytes are held at once.
CHUNK = 1000


def chunks_of(names: bytes, size: int = CHUNK) -> List[bytes]:
    """`names` ("/"-ended) as chunks of `size` names (the last of the rest),
    each "/"-ended."""
    # Finding each name's end cost 0.12 s at 10^6 names, while every other
    # core waited to read. So a chunk's end is guessed from the names' mean
    # length, its names counted in compiled code, and the guess moved to
    # the end of the size-th name: a few names away where names are alike.
    total = len(names)
    if total == 0:
        return []
    step = max(1, total * size // names.count(b"/"))
    chunks, start = [], 0
    while start < total:
        guess = min(total, start + step)
        count = names.count(b"/", start, guess)
        end = guess
        if count >= size:
            # Back to the size-th name's "/" (count - size + 1 of them).
            for _ in range(count - size + 1):
                end = names.rindex(b"/", start, end)
            end += 1
        else:
            # On to the size-th name's "/", or to the last one.
            while count < size and end < total:
                end = names.index(b"/", end) + 1
                count += 1
        chunks.append(names[start:end])
        start = end
    return chunks


def _each_chunk(names) -> Iterator[bytes]:
    """The chunks of `names`: one bytes object of "/"-ended names, a list
    of chunks (chunks_of), which it empties as it goes, or any other
    iterable of chunks."""
    if isinstance(names, bytes):
        names = chunks_of(names)
    if isinstance(names, list):
        names.reverse()
        while names:
            yield names.pop()
    else:
        yield from names


# Note [Reading the files in compiled code], file_index.py: read_files reads
# CHUNK files a call where the package was built; read_record, one at a
# time, where it was not.
def read_named(
    directory_fd: int,
    names,
    skipped: Counter,
    entries: Optional[IndexEntries],
    parts=None,
) -> Iterator[Record]:
    """The records of the files `names` names: "/"-ended names, as one
    bytes object, as a list of chunks of them (chunks_of), which it empties
    as it reads, so that the names read are let go (a million names are
    tens of MB), or as another iterable of chunks (fleet_report.TakenItems).
    Each file's entry is added to `entries` (a file that could not be
    read has none: the next run tries again) with its record's part
    appended to `parts` (a report_cache.PartsLog, or None: then each
    record comes as its fields, a plain tuple, which is what is kept and
    nothing counts: Note [Counting from the parts, job by job],
    fleet_report.py); what is not a record is counted in `skipped`."""
    for chunk in _each_chunk(names):
        yield from _read_chunk(directory_fd, chunk[:-1].split(b"/"), None, skipped, entries, parts)


def keep_named(
    directory_fd: int, names, skipped: Counter, entries: IndexEntries, parts
) -> Iterator[int]:
    """read_named's reading where each record's part is kept in `parts` and
    nothing counts the records: how many files each chunk held, as each is
    done. Each chunk is kept in compiled code where the package was built
    with it (Note [Keeping a chunk's records in compiled code],
    record_decoding.cpp)."""
    for chunk in _each_chunk(names):
        chunk = chunk[:-1].split(b"/")
        files = len(chunk)
        outcomes = None
        if keep_records is not None and read_files is not None:
            log = parts.log if parts.file is not None else 0
            kept, kept_names, keys, jobs, others = keep_records(
                directory_fd, chunk, MAX_RECORD_BYTES, log, parts.offset
            )
            if kept and not parts.append(kept):
                keys = without_parts(keys)
            entries.extend_packed(kept_names, keys, jobs)
            chunk = [name for name, _, _ in others]
            outcomes = [(key, what) for _, key, what in others]
        for _ in _read_chunk(directory_fd, chunk, outcomes, skipped, entries, parts):
            pass
        yield files


def _read_chunk(
    directory_fd: int,
    chunk: List[bytes],
    outcomes: Optional[list],
    skipped: Counter,
    entries: Optional[IndexEntries],
    parts,
) -> Iterator[Record]:
    """read_named's records of the files `chunk` names, whose read_files
    outcomes are `outcomes` (None: read them here)."""
    decoding = decode if parts is None else decode_fields
    if outcomes is None:
        if read_files is not None:
            outcomes = read_files(directory_fd, chunk, None, MAX_RECORD_BYTES)[0]
        else:
            buffer = bytearray(MAX_RECORD_BYTES + 1)
            outcomes = [_read_outcome(name, directory_fd, buffer, decoding) for name in chunk]
    # The chunk's records, kept in bulk at its end: (name, key, record).
    kept = []
    for name, (key, what) in zip(chunk, outcomes):
        if type(what) is bytes:
            try:
                what = decoding(what)
            except Skip as e:
                what = e.args[0]
            except (ValueError, RecursionError):
                # Not UTF-8, not JSON, or nested too deep.
                what = "malformed: not JSON"
        if type(what) is not str:
            if entries is not None:
                kept.append((name, key, what))
            yield what
            continue
        skipped[what] += 1
        if entries is not None and key is not None:
            entries.skip(name, key, what)
    if kept:
        _keep(kept, entries, parts)


def _keep(kept: list, entries: IndexEntries, parts) -> None:
    """The entries of the files of `kept` ((name, key, record) each), with
    their records' parts appended to `parts` where given (each record then
    its fields)."""
    places = None if parts is None else parts.extend([fields for _, _, fields in kept])
    entries.extend(kept, places)


def _read_outcome(name: bytes, directory_fd: int, buffer: bytearray, decoding) -> tuple:
    """read_files' outcome for one name, by read_record: (key, what
    `decoding` gave) or (key or None, why it was not read)."""
    try:
        record, key = read_record(name, directory_fd, buffer, decoding)
    except Skip as e:
        return (e.args[1] if len(e.args) > 1 else None), e.args[0]
    except (ValueError, RecursionError) as e:
        # Not UTF-8, not JSON, or nested too deep.
        return getattr(e, "key", None), "malformed: not JSON"
    except OSError:
        # No permission, or gone: not kept, the next run tries again.
        return None, "unreadable"
    return key, record
