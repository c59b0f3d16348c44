#pragma once

// Replacing one file in a directory that other users can write: the
// per-process record's file (Note [The per-process record],
// process_record.h).

#include <cstdint>
#include <string>

namespace torch::autograd::device_logging::detail {

// Note [Writing into a directory that others can write]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A fleet's record directory is shared: any user may create entries in it,
// so every name in it may be planted by someone else, and a job often runs
// as root. Nothing the writer does follows a name there:
// - DIR and DIR/.tmp (or DIR alone, where the temporaries are made in it:
//   TemporaryPlace below) are opened with O_NOFOLLOW | O_DIRECTORY, and every
//   later step is relative to those descriptors (openat, renameat,
//   unlinkat), so a link put in place of either after the check is never
//   followed. A DIR or DIR/.tmp that is a symbolic link is refused, and so is
//   a DIR/.tmp owned by another user without the sticky bit (its owner could
//   swap our temporary before it is renamed).
// - The temporary is created with O_CREAT | O_EXCL | O_NOFOLLOW under a name
//   with 64 random bits, so nobody can plant it beforehand: a name that exists
//   is never opened, truncated or written.
// - The record's own name in DIR is only ever the target of renameat, which
//   replaces whatever entry is there (a planted link is replaced, its target
//   is untouched) or fails (a directory).
// - Stale temporaries are removed only when they are regular files owned by
//   this user (fstatat without following links, then unlinkat), never
//   another user's.
// What this does not protect against: any user who can write DIR can add
// records of their own, or remove, rename or replace entries where DIR is
// not sticky; the report counts what is there. A directory the library
// creates is made sticky (mode 1777, like /tmp), so that users share it
// without being able to touch each other's records. Parent directories of
// DIR are the user's own choice and are followed as given.

// Where the temporary is made: DIR/.tmp (the records' directory, which
// readers list), or DIR itself, for a directory that must hold nothing but
// its files (node_exporter's textfile directory, which ignores names that do
// not end in .prom); then DIR is checked as DIR/.tmp would be.
enum class TemporaryPlace : uint8_t { kTmpSubdirectory, kBesideTheFile };

// Replaces DIR/`name` with `text` atomically and durably: a new temporary
// named `temporary_prefix` plus random bits and ".tmp", written and
// fsync'ed, renamed into place, then DIR fsync'ed. Creates DIR (and its
// parents) and DIR/.tmp when missing, DIR and DIR/.tmp with mode 1777.
// Removes temporaries of this user whose writer can no longer finish: those
// named `stale_prefix` followed by the pid of a process that is gone, and any
// a day old. Throws std::runtime_error with a one-line cause.
void replace_file_in_shared_directory(
    const std::string& dir,
    const std::string& name,
    const std::string& text,
    const std::string& temporary_prefix,
    const std::string& stale_prefix,
    TemporaryPlace place = TemporaryPlace::kTmpSubdirectory);

} // namespace torch::autograd::device_logging::detail
