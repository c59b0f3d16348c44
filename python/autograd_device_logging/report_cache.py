"""The fleet report's cache: what each record file gave the report last
time, kept by the file's (name, size, mtime, inode) in a directory of the
user's own.

Note [The report's cache]
~~~~~~~~~~~~~~~~~~~~~~~~~
A daily report reads mostly the files it read the day before. So the cache
keeps, per set of options, the files' index (each file's key: name, size,
modification time in ns, inode; and the job its record counted in, or why
it was skipped: Note [The files' index], file_index.py) and each job's part
of the report (Note [A job's part of the report], fleet_totals.py), and
beside it logs of the records' parts (Note [A record's part, kept]). A
re-run counts again only the jobs whose files changed (Note [A re-run reads
the jobs that changed], fleet_report.py): a file rewritten in place changes
its size or
mtime, a file replaced by a rename changes its inode. The key is taken
before the read (from fstat on the opened file, or lstat when it is
compared), so a file changed while it is read has a new key at the next
run: the cache can be late by a run, never wrong about a key. A job's part
is made from its records by the same code whether they were read now or
before, so a cached and a fresh report are the same report, to the byte.

The file holds a header (the cache's format and a hash of the reader's
source, so a package that reads records differently starts afresh), a CRC
of its body, and the body: the index's two buffers, then the reasons and
the jobs' parts in marshal (plain tuples, dicts and strings; marshal's format
belongs to the interpreter, so the header names it too: Note [The cache's
file]). A re-run that reads few files writes only the changes since, beside
it (Note [The cache's changes]). A file or changes that are truncated,
corrupt, from another reader or unreadable are ignored with one line on
stderr, and rewritten.

The cache lives in the user's cache directory ($XDG_CACHE_HOME, else
~/.cache, then autograd_device_logging/fleet-report/<hash of DIR's real path,
device and inode>), never in DIR: any user may write DIR (Note [The
per-process record], process_record.h), and a cache there could be forged
to hide records. The
report refuses a --cache-dir inside DIR, and uses a cache folder only when it
is a folder (not a link) of the user's own that nobody else may write; its
files are created exclusively and renamed into place. `--cache-dir` moves it,
`--no-cache` neither reads nor writes it, and removing the folder clears it.
"""

from __future__ import annotations

import errno
import hashlib
import marshal
import mmap
import os
import stat
import sys
import zlib
from array import array
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from . import settings
from .file_index import FIELDS, SPAN_LENGTH_BITS, keep_unchanged_only, unchanged_entries_of

try:
    from ._record_files import has_libdeflate, libdeflate_crc32
except ImportError:  # Note [Reading the files in compiled code], file_index.py
    has_libdeflate = libdeflate_crc32 = None

# The CRC-32 of the cache's files and parts: zlib's, computed by libdeflate
# where the machine has it (Note [The cache's CRC-32 from libdeflate],
# part_checksum.h).
crc32 = libdeflate_crc32 if has_libdeflate is not None and has_libdeflate() else zlib.crc32

# The layout of the cache's files; a new one starts the cache afresh.
FORMAT = 4
# The files whose code decides what a record's part is.
_READER_SOURCES = (
    "record_fields.py",
    "record_decoder.py",
    "cost_statistics.py",
    "vocabulary.py",
    "file_index.py",
    "record_reader.py",
    "fleet_totals.py",
    "report_cache.py",
)
_MAGIC = b"autograd_device_logging fleet report cache\n"
# What reads a file's body back: marshal's format is the interpreter's.
_INTERPRETER = f"{sys.implementation.cache_tag} marshal {marshal.version}"

# What a report leaves for the next with the same options: the files' index
# (names, keys: Note [The files' index], file_index.py), the reasons of the
# skipped files' groups ({group: reason}) and each job's part ({job:
# JobResult}, fleet_totals.py). save() takes the names and keys as lists
# of buffers, which the file holds one after the other.
State = Tuple[object, object, Dict[int, str], Dict[str, tuple]]


def default_root() -> str:
    """The per-user folder of every record directory's cache."""
    return os.path.join(settings.user_cache_home(), "autograd_device_logging", "fleet-report")


def _reader_tag() -> Optional[bytes]:
    """The header of this reader's files; None where its source cannot be
    read (a package without its .py files), which cannot tell one reader
    from another."""
    digest = hashlib.sha256(f"format {FORMAT}\n{_INTERPRETER}\n".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        for name in _READER_SOURCES:
            with open(os.path.join(here, name), "rb") as f:
                digest.update(f.read())
    except OSError:
        return None
    return _MAGIC + digest.hexdigest().encode() + b"\n"


def inside(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or under it, links resolved."""
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([path, directory]) == directory


class ReportCache:
    """The cache of one record directory. Picklable before use: the reading
    processes each open their own descriptor."""

    def __init__(self, directory: str, root: Optional[str] = None):
        st = os.stat(directory)
        real = os.path.realpath(directory)
        name = hashlib.sha256(f"{real}\0{st.st_dev}\0{st.st_ino}".encode()).hexdigest()[:32]
        self.root = root or default_root()
        self.folder = os.path.join(self.root, name)
        self.directory = real
        self.tag = _reader_tag()
        # Each problem met, as one line: the report prints the first.
        self.problems: List[str] = []
        self._fd: Optional[int] = None
        self._usable: Optional[bool] = None
        # The file the last load() read, which the next may change (Note
        # [The cache's changes]).
        self.loaded: Optional[Base] = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fd"], state["_usable"], state["problems"] = None, None, []
        state["loaded"] = None
        return state

    def _problem(self, what: str) -> None:
        self.problems.append(f"ignoring the report's cache {what}; rebuilding it")

    def _open(self) -> bool:
        """Opens the folder, made if need be; False (with a problem) when it
        is not one this user alone may write."""
        if self._usable is not None:
            return self._usable
        self._usable = False
        if self.tag is None:
            self.problems.append(
                "not using the report's cache: the reader's source files are not installed, "
                "so a cache of another version could not be told apart"
            )
            return False
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            self.problems.append(f"not using the report's cache {self.folder}: {e.strerror or e}")
            return False
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            os.close(fd)
            self.problems.append(
                f"not using the report's cache {self.folder}: others may write it "
                "(it must be a folder of your own, mode 0700)"
            )
            return False
        self._fd, self._usable = fd, True
        try:
            with open(
                os.open(
                    "directory",
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                    0o600,
                    dir_fd=fd,
                ),
                "w",
            ) as f:
                f.write(self.directory + "\n")
        except OSError:
            pass  # only a note for whoever looks in the folder
        return True

    def create(self, name: str) -> int:
        """A descriptor of the new file `name` in the opened folder, mode
        0600, created exclusively and through no link (a FileExistsError
        where the name is taken)."""
        return os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=self._fd,
        )

    def name_of(self, options: tuple) -> str:
        return self._name(options)

    def _name(self, options: tuple) -> str:
        """The file of the report made with `options`: each set of options
        keeps its own jobs' parts."""
        return "report-" + hashlib.sha256(repr(options).encode()).hexdigest()[:16]

    def _contents(self, name: str) -> Optional[memoryview]:
        """The body of the cache file `name` in the folder (after its header
        and CRC, which are checked); None where there is none, or where it
        cannot be used (a problem says why)."""
        path = os.path.join(self.folder, name)
        try:
            # Not blocking: a FIFO in its place is not waited on.
            fd = os.open(
                name,
                os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                dir_fd=self._fd,
            )
        except OSError as e:
            if e.errno != errno.ENOENT:
                self._problem(f"{path}: {e.strerror or e}")
            return None
        try:
            with open(fd, "rb") as f:
                data = _mapped(f.fileno())
        except (OSError, ValueError) as e:
            self._problem(f"{path}: {getattr(e, 'strerror', None) or e}")
            return None
        tag = self.tag
        if data[: len(tag)] != tag:
            reason = (
                "written by another version" if data[: len(_MAGIC)] == _MAGIC else "not a cache"
            )
            self._problem(f"{path}: {reason}")
            return None
        body = memoryview(data)[len(tag) + 4 :]
        if int.from_bytes(data[len(tag) : len(tag) + 4], "little") != crc32(body):
            self._problem(f"{path}: corrupt")
            return None
        return body

    def load(self, options: tuple) -> Optional[State]:
        """What the last report with `options` left (its file and the
        changes since, Note [The cache's changes]); None when there is none,
        or when it cannot be used (a problem says why)."""
        self.loaded = None
        if not self._open():
            return None
        name = self._name(options)
        body = self._contents(name)
        if body is None:
            return None
        try:
            identity, (names, keys, reasons, jobs) = _parsed(body)
        except (ValueError, EOFError, TypeError):
            self._problem(f"{os.path.join(self.folder, name)}: corrupt")
            return None
        # The file's bytes go with the last view of them (names and keys).
        del body
        entries = sum(map(len, keys)) // (8 * FIELDS)
        base = Base(name, identity, entries, jobs)
        problems = len(self.problems)
        changes = self._contents(changes_name(name))
        if changes is not None and changes[:IDENTITY_BYTES] == identity:
            # Changes since another file of this name (made by a report
            # that ran meanwhile) are not these.
            try:
                state = base.changed(names, keys, changes)
            except (ValueError, EOFError, TypeError):
                self._problem(f"{os.path.join(self.folder, changes_name(name))}: corrupt")
                return None
        elif len(self.problems) > problems:
            return None
        else:
            state = b"".join(names), _joined_keys(keys), reasons, jobs
        self.loaded = base
        return state

    def open_log(self, cache_name: str, log: int) -> Optional[int]:
        """A descriptor of a part log, to read its parts with os.pread (Note
        [The logs are read, not mapped], fleet_report.py) and to close; None
        where it cannot be read."""
        if not self._open():
            return None
        try:
            fd = os.open(
                part_log_name(cache_name, log),
                os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=self._fd,
            )
        except OSError:
            return None
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                fd, opened = None, fd
                return opened
            return None
        except OSError:
            return None
        finally:
            if fd is not None:
                os.close(fd)

    def parts_worth_keeping(self, cache_name: str, logs: set, live: int) -> bool:
        """Whether the part logs `logs`, which hold `live` bytes of parts
        still named, are all there and not mostly parts of files gone
        (Note [A record's part, kept])."""
        total = 0
        for log in logs:
            try:
                total += os.stat(
                    part_log_name(cache_name, log), dir_fd=self._fd, follow_symlinks=False
                ).st_size
            except OSError:
                self._problem(f"{os.path.join(self.folder, part_log_name(cache_name, log))}: gone")
                return False
        return total <= 2 * live + (16 << 20)

    def remove_logs(self, cache_name: str, made: Optional[set], named: set, before: float) -> None:
        """Removes the part logs of `cache_name` that this run made
        (`made`), or else those no entry names (`named`) older than
        `before` (a concurrent report's new logs stay)."""
        prefix = part_log_name(cache_name, 0)[: -len("00000000")]
        try:
            entries = os.listdir(self._fd)
        except OSError:
            return
        for name in entries:
            if not name.startswith(prefix):
                continue
            try:
                log = int(name[len(prefix) :], 16)
            except ValueError:
                continue
            try:
                if made is not None:
                    if log in made:
                        os.unlink(name, dir_fd=self._fd)
                elif log not in named:
                    st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
                    if st.st_mtime < before:
                        os.unlink(name, dir_fd=self._fd)
            except OSError:
                pass

    def writer(self, options: tuple, rereading: Optional[int] = None):
        """A writer of what the report with `options` leaves (a CacheWriter,
        or a ChangesWriter where a re-run reads `rereading` files of those
        load() found: Note [The cache's changes]); None where the cache
        cannot be used (a problem says why)."""
        if not self._open():
            return None
        name, base = self._name(options), self.loaded
        if (
            rereading is not None
            and base is not None
            and base.name == name
            and (rereading + base.changed_entries) * CHANGES_SHARE <= base.entries
        ):
            return ChangesWriter(self, base)
        return CacheWriter(self, name)

    def save(self, options: tuple, state: State) -> None:
        """Writes `state` (names and keys as lists of buffers) at once."""
        writer = self.writer(options)
        if writer is not None:
            names, keys, reasons, results = state
            for n, k in zip(names, keys):
                writer.add(n, k)
            writer.finish(reasons, results)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self._usable = None, None


# Note [The cache's file]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# The index of a million files is tens of MB, so it is never held whole while
# the report reads: each part of it goes into the file as a reading process
# hands it over (CacheWriter.add), and the file is whole only when renamed
# into place. After the header and a CRC of the body, the body is: the
# file's identity (IDENTITY_BYTES random bytes, which its changes name: Note
# [The cache's changes]); parts of (names length, keys length, names, keys),
# each length 8 bytes little-endian; then the reasons and the jobs' parts in
# marshal; then that marshal's offset in the body, 8 bytes. The marshal is
# of the reasons ({group: reason}), then of dicts of at most JOBS_PER_PART
# jobs' parts, each after its length (8 bytes).
IDENTITY_BYTES = 16


# Note [The cache file is mapped, not read]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A re-run loads the cache file (130 MB at 10^6 records) while the
# directory is listed, and the keys are checked only once it is loaded
# (Note [Loading the cache while listing], fleet_report.py). Read into a
# bytes object, it cost 0.08 s to fault in and fill the new memory and 0.01 s
# to give it back, besides the CRC; mapped, its pages come from the page
# cache as they are: 0.03 s with the CRC. What is kept (the names, the
# keys, the jobs) is copied or decoded out of it, and the mapping goes with
# the last view of it. The report's writers never change a file in place:
# each writes a new one and renames it over the old (CacheWriter), so the
# mapped file stays as it was read. Only a process that truncates it in
# place while it is mapped (none of this package's) makes reading it fault.
def _mapped(fd: int):
    """The contents of the regular file open as `fd`, mapped read-only
    (b"" where it is empty); OSError or ValueError where it cannot be."""
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    size = status.st_size
    if size == 0:
        return b""
    return mmap.mmap(fd, size, prot=mmap.PROT_READ)


def _parsed(body: memoryview) -> Tuple[bytes, tuple]:
    """(the file's identity, the state a file's body holds, its names and
    keys as lists of views of `body`); ValueError where it is not one."""
    if len(body) < IDENTITY_BYTES + 8:
        raise ValueError("corrupt")
    end = int.from_bytes(body[-8:], "little")
    if end > len(body) - 8:
        raise ValueError("corrupt")
    names, keys = [], []
    at = IDENTITY_BYTES
    while at < end:
        names_length = int.from_bytes(body[at : at + 8], "little")
        keys_length = int.from_bytes(body[at + 8 : at + 16], "little")
        at += 16
        if keys_length % (8 * FIELDS) or at + names_length + keys_length > end:
            raise ValueError("corrupt")
        names.append(body[at : at + names_length])
        keys.append(body[at + names_length : at + names_length + keys_length])
        at += names_length + keys_length
    if at != end:
        raise ValueError("corrupt")
    pieces = []
    while at < len(body) - 8:
        length = int.from_bytes(body[at : at + 8], "little")
        at += 8
        if at + length > len(body) - 8:
            raise ValueError("corrupt")
        # loads of a slice: twice as fast as load from a file object.
        pieces.append(marshal.loads(body[at : at + length]))
        at += length
    if not pieces or any(type(piece) is not dict for piece in pieces):
        raise ValueError("corrupt")
    results: Dict[str, tuple] = {}
    for part in pieces[1:]:
        results.update(part)
    return bytes(body[:IDENTITY_BYTES]), (names, keys, pieces[0], results)


JOBS_PER_PART = 4096


# Note [The cache keeps the jobs in name order]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A re-run assembles the report from every job's part (fleet_totals.
# Assembled): the row for all jobs takes each job's light in name order,
# and what crosses jobs goes over them in the order of the dict. Loaded in
# the order the counting processes handed them over (the order of their
# groups, a hash of the name), the parts lay in memory in no order the
# assembly follows, and each job's read missed the processor's cache:
# assembling 55,000 jobs took 0.147 s; loaded in name order, 0.094 s
# (best of 7 on this project's 2-core machine). So the file holds the
# jobs' parts in name order (CacheWriter.finish), marshal loads them so
# (one after the other in memory), and a re-run puts the jobs it keeps
# first, as the file held them, and the few it counted again after
# (fleet_report._assemble). A job's part is the same in any order: only
# where it lies changes.


class CacheWriter:
    """The next state of one cache file (Note [The cache's file]): a file of
    this process's own, created exclusively and renamed into place by
    finish(), so that a reader sees the old state or the new, never part."""

    def __init__(self, cache: ReportCache, name: str):
        self.cache, self.name = cache, name
        self.temporary = f".{name}.{os.getpid()}"
        self.crc = 0
        self.written = 0
        self.file = None
        self.failed = False
        try:
            self.file = open(cache.create(self.temporary), "wb")
            self.file.write(cache.tag)
            self.file.write(bytes(4))  # the CRC, once the body is written
            self._write(os.urandom(IDENTITY_BYTES))
        except OSError as e:
            self._failed(e)

    def _failed(self, e: OSError) -> None:
        self.failed = True
        self.cache.problems.append(
            f"could not write the report's cache {os.path.join(self.cache.folder, self.name)}: "
            f"{e.strerror or e}"
        )
        self.abandon()

    def _write(self, piece) -> None:
        self.file.write(piece)
        self.crc = crc32(piece, self.crc)
        self.written += len(piece)

    def _marshal(self, value) -> None:
        piece = marshal.dumps(value)
        self._write(len(piece).to_bytes(8, "little"))
        self._write(piece)

    def add(self, names, keys) -> None:
        """Adds index entries: names ("/"-ended) and their keys."""
        if self.file is None:
            return
        try:
            self._write(len(names).to_bytes(8, "little") + len(keys).to_bytes(8, "little"))
            self._write(names)
            self._write(keys)
        except OSError as e:
            self._failed(e)

    def finish(
        self, reasons: Dict[int, str], results: Dict[str, tuple], made: Optional[Iterable] = None
    ) -> None:
        """Writes the rest and puts the file in place: every job's part
        (`made`, which ChangesWriter.finish takes, is not needed here)."""
        if self.file is None:
            return
        try:
            end = self.written
            self._marshal(reasons)
            # The jobs' parts a few thousand at a time: never all of them
            # twice in memory (the cold run's memory target), in name order
            # (Note [The cache keeps the jobs in name order]).
            order = sorted(results)
            for start in range(0, len(order), JOBS_PER_PART):
                self._marshal({job: results[job] for job in order[start : start + JOBS_PER_PART]})
            self._write(end.to_bytes(8, "little"))
            self.file.seek(len(self.cache.tag))
            self.file.write(self.crc.to_bytes(4, "little"))
            self.file.close()
            self.file = None
            os.replace(
                self.temporary, self.name, src_dir_fd=self.cache._fd, dst_dir_fd=self.cache._fd
            )
        except OSError as e:
            self._failed(e)
            return
        # Changes to the file before are no longer changes to this one.
        try:
            os.unlink(changes_name(self.name), dir_fd=self.cache._fd)
        except OSError:
            pass

    def carry(self, names: bytes, keys, unchanged: bytearray) -> None:
        """Adds the entries of the index load() gave (`names`, `keys`) that
        `unchanged` flags."""
        self.add(*unchanged_entries_of(names, keys, unchanged))

    def abandon(self) -> None:
        """Leaves the cache as it was."""
        self.file = _closed(self.file)
        try:
            os.unlink(self.temporary, dir_fd=self.cache._fd)
        except OSError:
            pass


def _closed(file) -> None:
    """Closes `file` (None: none), a cache file being given up or done
    with, whose close may fail (a full disk): None, for its holder."""
    if file is not None:
        try:
            file.close()
        except OSError:
            pass
    return None


# Note [The cache's changes]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A re-run changes a few files of many, and writing the whole index and
# every job's part again (127 MB at 10^6 records) took about 0.45 s of a
# 3.2 s re-run; the changes after 1% of the files were replaced, 9 MB, take
# 0.05 s. So a re-run whose files to read, with the entries the changes
# already hold, are at most 1/CHANGES_SHARE of the file's entries keeps the
# entries of the files it reads in memory (ChangesWriter) and writes, beside
# the file load() read, what changed since: its changes file (changes_name),
# created exclusively and renamed into place like the file. It begins with
# the file's identity (the random bytes each file begins with: Note [The
# cache's file]), so that changes to a file another report replaced
# meanwhile are never applied to its successor; then come layers, one per
# re-run, each after its length (8 bytes): in marshal, the positions of the
# entries gone, the entries added, the reasons, the jobs' parts counted and
# the jobs gone. A position counts in the file's entries followed by every
# layer's entries added, so a layer may take away what an earlier one added.
# A load applies the layers in order, and the state it gives is the one the
# whole file would have held (test_report_cache.py holds the two equal).
#
# Each re-run copies the layers before as they lie and adds its own:
# Note [A re-run adds a layer to the changes]. Once the layers would add or
# take away more than 1/CHANGES_SHARE of the file's entries, name more than
# 1/JOB_CHANGES_SHARE of its jobs in all (counted or gone, a job once per
# layer), or number more than MOST_LAYERS, the re-run writes the whole file
# anew and the changes go. A changes file that is corrupt, from another
# version or unreadable makes the whole cache ignored with one line, as a
# corrupt file does.
CHANGES_SHARE = 4
JOB_CHANGES_SHARE = 2
MOST_LAYERS = 32


def changes_name(name: str) -> str:
    return name + ".changes"


class Base:
    """A cache file as load() read it, with the layers of changes since that
    its changes file held (Note [The cache's changes])."""

    def __init__(self, name: str, identity: bytes, entries: int, jobs: Dict[str, tuple]):
        self.name, self.entries = name, entries
        # The file's own jobs' parts (how many: the share of changed jobs).
        self.jobs = jobs
        # The jobs' parts as load() gave them, the layers applied.
        self.loaded_jobs = jobs
        # The changes file's body as it lies (its identity, then the
        # layers), which the next changes begin with.
        self.changes = memoryview(identity)
        self.layers = 0
        # The positions of the entries gone (Note [The cache's changes]),
        # in order; the index load() gave holds the others in order.
        self.gone = array("q")
        # The entries the layers added, and the jobs they named, in all.
        self.changed_entries = 0
        self.changed_jobs = 0

    def changed(self, file_names: list, file_keys: list, changes: memoryview) -> State:
        """The state of the file (its names and keys as _parsed gives them,
        which are let go here; its reasons and jobs' parts as this Base
        holds them) with the layers of `changes` (a changes file's body);
        ValueError where they are not the file's."""
        at, end = IDENTITY_BYTES, len(changes)
        layers = []
        while at < end:
            length = int.from_bytes(changes[at : at + 8], "little")
            at += 8
            if at + length > end:
                raise ValueError("corrupt")
            layers.append(marshal.loads(changes[at : at + length]))
            at += length
        if not layers:
            raise ValueError("corrupt")
        merged = dict(self.jobs)
        names_of, keys_of, positions = [*file_names], [*file_keys], []
        whole = self.entries
        for layer in layers:
            if type(layer) is not tuple or len(layer) != 6:
                raise ValueError("corrupt")
            gone, names, keys, reasons, jobs, removed = layer
            if not (
                type(gone) is bytes
                and type(names) is bytes
                and type(keys) is bytes
                and type(reasons) is dict
                and type(jobs) is dict
                and type(removed) is list
            ):
                raise ValueError("corrupt")
            gone = array("q", gone)
            # Each layer's positions ascending, among the entries before it.
            if any(b <= a for a, b in zip(gone, gone[1:])) or (
                gone and not 0 <= gone[0] <= gone[-1] < whole
            ):
                raise ValueError("corrupt")
            if len(keys) % (8 * FIELDS) or names.count(b"/") != len(keys) // (8 * FIELDS):
                raise ValueError("corrupt")
            if names and not names.endswith(b"/"):
                raise ValueError("corrupt")
            merged.update(jobs)
            try:
                for job in removed:
                    del merged[job]
            except (KeyError, TypeError):
                raise ValueError("corrupt") from None
            positions.append(gone)
            names_of.append(names)
            keys_of.append(keys)
            whole += len(keys) // (8 * FIELDS)
            self.changed_jobs += len(jobs) + len(removed)
        self.changed_entries = whole - self.entries
        self.layers = len(layers)
        self.changes = changes
        self.loaded_jobs = merged
        flags = bytearray(b"\x01") * whole
        for gone in positions:
            for i in gone:
                if not flags[i]:
                    # Gone twice.
                    raise ValueError("corrupt")
                flags[i] = 0
        self.gone = array("q", _zeros(flags, whole))
        # One copy of the file's entries and the layers' together, then
        # the file's bytes let go before the entries gone are left out
        # where they lie (Note [The entries gone are left out in place],
        # file_index.cpp).
        all_names, all_keys = bytearray().join(names_of), _joined_keys(keys_of)
        file_names.clear()
        file_keys.clear()
        del names_of, keys_of
        if self.gone:
            keep_unchanged_only(all_names, all_keys, flags)
        return all_names, all_keys, reasons, merged


def _joined_keys(pieces: list) -> array:
    """The index's keys of `pieces` (buffers of int64s) in one array, each
    copied once (a bytes object joined first, then the array of it, copied
    45 MB twice at 10^6 entries)."""
    keys = array("q")
    for piece in pieces:
        keys.frombytes(piece)
    return keys


def _zeros(flags: bytearray, end: int) -> Iterator[int]:
    """The positions of the zeros of flags[:end]."""
    at = flags.find(0, 0, end)
    while at >= 0:
        yield at
        at = flags.find(0, at + 1, end)


def newly_gone(gone: array, now_gone: Iterator[int]) -> array:
    """The positions, among all the entries, of `now_gone`: positions
    (ascending) among the entries not in `gone` (positions among all,
    ascending)."""
    out = array("q")
    g, count = 0, len(gone)
    for k in now_gone:
        while g < count and gone[g] <= k + g:
            g += 1
        out.append(k + g)
    return out


# Note [A re-run adds a layer to the changes]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Written as every change since the file, the changes of a daily re-run
# grew by a day's each day: on its second day, with 1% of 10^6 records
# replaced each day, the parts of 18,000 jobs (17.6 MB), which took
# ChangesWriter.finish 0.14-0.22 s against 0.05-0.07 s on the first. So a
# re-run writes the changes file's bytes as load() mapped them (the layers
# before, never decoded again) and adds one layer of its own: the positions
# gone since, the entries of the files it read, and the parts of the jobs
# whose parts are new (counted again, or kept with a new line). On that
# second day, marshal took 0.049 s for the layer against 0.083 s for all
# the changes; writing the bytes before costs a copy in the kernel. What was
# written stays as it was; MOST_LAYERS and the shares
# of Note [The cache's changes] bound what a load applies.


# Note [The jobs whose parts are new]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A layer holds the parts of the jobs whose parts are not those load() gave:
# the jobs counted again, and the jobs kept whose line was made again for
# the agents that join them now (fleet_totals.Assembled.line). Found by
# looking up each of the report's jobs among those loaded, that took 0.03 s
# of a re-run's 0.07 s in ChangesWriter.finish at 10^6 records (55,000
# jobs, 9,200 counted again), on the one core that works then. The report
# knows which they are, so it names them (`made`): only those are looked
# up, and a job named whose part is the one loaded is left out as before.
# Where no names are given, every job is looked up.


class ChangesWriter:
    """The changes since the file load() read, a layer added (Note
    [A re-run adds a layer to the changes]), or the whole file anew where
    they would be too many: a CacheWriter's calls, the entries of the files
    read kept in memory (a re-run that writes changes reads few)."""

    def __init__(self, cache: ReportCache, base: Base):
        self.cache, self.base, self.name = cache, base, base.name
        self.names: List[bytes] = []
        self.keys: List[bytes] = []
        self.carried = None
        self.failed = False
        self.temporary = f".{changes_name(self.name)}.{os.getpid()}"
        # Whether the temporary file is there, to remove.
        self.made = False

    def add(self, names: bytes, keys: bytes) -> None:
        self.names.append(names)
        self.keys.append(keys)

    def carry(self, names: bytes, keys, unchanged: bytearray) -> None:
        """As CacheWriter.carry: `names` and `keys` are load()'s index."""
        self.carried = (names, keys, unchanged)

    def finish(
        self, reasons: Dict[int, str], results: Dict[str, tuple], made: Optional[Iterable] = None
    ) -> None:
        """As CacheWriter.finish; `made` names the jobs of `results` whose
        parts may not be those load() gave (None: any of them), so that the
        others are not looked up (Note [The jobs whose parts are new])."""
        base = self.base
        names, keys, unchanged = self.carried
        gone = newly_gone(base.gone, _zeros(unchanged, len(unchanged)))
        added_names = b"".join(self.names)
        added_keys = b"".join(self.keys)
        before = base.loaded_jobs
        # A job kept may have a part of its own too: another line, made for
        # the agents that join it now.
        if made is None:
            jobs = {job: part for job, part in results.items() if before.get(job) is not part}
        else:
            jobs = {}
            for job in made:
                part = results.get(job)
                if part is not None and before.get(job) is not part:
                    jobs[job] = part
        removed = sorted(before.keys() - results.keys())
        too_many = (
            (base.changed_entries + len(added_keys) // (8 * FIELDS)) * CHANGES_SHARE > base.entries
            or (len(base.gone) + len(gone)) * CHANGES_SHARE > base.entries
            or (base.changed_jobs + len(jobs) + len(removed)) * JOB_CHANGES_SHARE > len(base.jobs)
            or base.layers >= MOST_LAYERS
        )
        if too_many:
            whole = CacheWriter(self.cache, self.name)
            whole.carry(names, keys, unchanged)
            for n, k in zip(self.names, self.keys):
                whole.add(n, k)
            whole.finish(reasons, results)
            self.failed = whole.failed
            return
        layer = marshal.dumps((gone.tobytes(), added_names, added_keys, reasons, jobs, removed))
        length = len(layer).to_bytes(8, "little")
        folder = self.cache._fd
        try:
            fd = self.cache.create(self.temporary)
            self.made = True
            with open(fd, "wb") as f:
                f.write(self.cache.tag)
                crc = crc32(layer, crc32(length, crc32(base.changes)))
                f.write(crc.to_bytes(4, "little"))
                f.write(base.changes)
                f.write(length)
                f.write(layer)
            os.replace(
                self.temporary, changes_name(self.name), src_dir_fd=folder, dst_dir_fd=folder
            )
            self.made = False
        except OSError as e:
            self.failed = True
            self.cache.problems.append(
                "could not write the report's cache "
                f"{os.path.join(self.cache.folder, changes_name(self.name))}: {e.strerror or e}"
            )
            self.abandon()

    def abandon(self) -> None:
        """Leaves the cache as it was."""
        if self.made:
            self.made = False
            try:
                os.unlink(self.temporary, dir_fd=self.cache._fd)
            except OSError:
                pass


# Note [A record's part, kept]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A re-run counts again every record of a job whose files changed (Note [A
# re-run reads the jobs that changed], fleet_report.py); reading and
# decoding the unchanged ones again costs as much as a fresh read. So each
# reading process, as it reads, appends each record's part (the Record's
# fields as a tuple, in marshal) to a part log of its own in the cache's
# folder, and the file's index entry says where (Note [The files' index],
# file_index.py), with the part's CRC-32. Every record is then counted
# from its part (Note [Counting from the parts, job by job],
# fleet_report.py), and a re-run takes an unchanged file's record from the
# part an earlier run wrote; a log that is gone or a part whose CRC differs
# makes it read every file again, with one line. Logs are written
# as the reading goes, so they cost no memory; a log no entry names is
# removed at the next save, and when the logs hold more than twice the
# parts still named (each run leaves the parts of changed files behind),
# the report reads every file afresh and starts new logs.
def part_log_name(cache_name: str, log: int) -> str:
    return f"parts-{cache_name[len('report-'):]}-{log:08x}"


class PartsLog:
    """A reading process's log of records' parts (Note [A record's part,
    kept]): created exclusively in the cache's folder, appended to."""

    def __init__(self, cache: ReportCache, cache_name: str):
        self.file = None
        self.log = self.offset = 0
        if not cache._open():
            # Only ever in the cache's folder: without it, no log.
            return
        for _ in range(8):
            log = int.from_bytes(os.urandom(4), "little") >> 1 or 1
            name = part_log_name(cache_name, log)
            try:
                fd = cache.create(name)
            except FileExistsError:
                continue
            except OSError:
                return
            self.file, self.log, self.name = open(fd, "wb", buffering=1 << 20), log, name
            self.cache = cache
            self.offset = 0
            return

    def extend(self, fields: list) -> list:
        """Appends records' parts (each a Record's fields, as a tuple) in
        one write; where each is (Note [The files' index]), or (0, 0) for
        each where they could not be written."""
        if self.file is None:
            return [(0, 0)] * len(fields)
        parts = [marshal.dumps(f) for f in fields]
        log, offset, places = self.log << 32, self.offset, []
        if not self.append(b"".join(parts)):
            return [(0, 0)] * len(fields)
        for part in parts:
            places.append((log | crc32(part), offset << SPAN_LENGTH_BITS | len(part)))
            offset += len(part)
        return places

    def append(self, parts: bytes) -> bool:
        """Appends parts made elsewhere (record_decoding's keep_records,
        for this log at its offset); False where they could not be written,
        and the log is closed."""
        if self.file is None:
            return False
        try:
            self.file.write(parts)
        except OSError:
            self.close()
            return False
        self.offset += len(parts)
        return True

    def close(self) -> None:
        """Closes the log; one that holds no part goes (no entry names it)."""
        if self.file is not None:
            self.file = _closed(self.file)
            if not self.offset:
                try:
                    os.unlink(self.name, dir_fd=self.cache._fd)
                except OSError:
                    pass
