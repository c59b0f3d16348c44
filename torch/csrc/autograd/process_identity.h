#pragma once

// Who this process is, for its record (Note [A process's identity is
// decided once, at start-up]).

#include <cstdint>
#include <string>
#include <utility>

#include <sys/types.h>

namespace torch::autograd::device_logging::detail {

// Note [A process's identity is decided once, at start-up]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A record is evidence, and a record filed under the wrong job misleads more
// than none. So who the process is (host, job and what named it, role, rank,
// the process that started it) is worked out once, when the library loads,
// from the environment and /proc as they are then, and every write of the
// record reuses it: whether the process exits, raises, is killed, or changes
// its environment later, each version of its record names the same job.
// The program is the one part the library cannot know alone in a Python
// process: the Python package tells it (set_record_program) right after
// loading the library, at the first `import torch`, while __main__ still says
// what the user ran (CPython drops __main__.__file__ once the script has
// returned, before atexit handlers run). A job named by nothing job-wide is
// the program at the host (Note [Which job a process belongs to]), so that
// name is fixed from then on too.
//
// Note [A child joins the job of the program that started it]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A run is more than its first process: a multiprocessing spawn child (which
// starts as `python -c` and imports torch before multiprocessing makes the
// parent's script its __main__), DataLoader workers, torch.compile's worker
// processes, a script's subprocess. Where nothing job-wide names the job,
// each would otherwise be a job of its own program. So the Python package,
// when it loads the library, sets $AUTOGRAD_DEVICE_LOGGING_PROGRAM to the
// program its job is named after, unless it is set already (then this
// process is such a child, and passes its parent's on): every process the
// run starts inherits it, and its job is that program at the host. Its own
// program stays in its record's `program`. C++ programs do not set it
// (setenv() in a library's constructor could race with the program's own
// threads), but they do join the job of a Python program that started them.
// torchrun's agent passes none on: a launcher names no job, and its ranks,
// where its run id names none, are each named by its own script.
//
// The parent (its pid and start time) lets a report put a torchrun agent,
// whose run id is made after it started (a --standalone rendezvous draws it
// at random) and reaches only its workers' environment, into the job of the
// workers it started (Note [An agent joins its workers' job],
// fleet_totals.py). A forked child keeps the identity of the process it was
// forked from, as it keeps the rest of its state.
struct ProcessIdentity {
  std::string host;
  // Empty where nothing job-wide names the job: then it is the program at
  // the host, and job_source is "program".
  std::string job;
  std::string job_source;
  // $AUTOGRAD_DEVICE_LOGGING_PROGRAM: the program of the process that
  // started this one, whose job this one joins where nothing job-wide names
  // it (Note [A child joins the job of the program that started it]).
  std::string inherited_program;
  // "rank" (RANK is set), "agent" (torchrun's elastic agent) or "other".
  std::string role;
  // The environment's RANK, LOCAL_RANK and WORLD_SIZE, as set ("" if not).
  std::string rank;
  std::string local_rank;
  std::string world_size;
  pid_t parent_pid = 0;
  // The parent's start in nanoseconds since the epoch; 0 when unknown.
  int64_t parent_start_ns = 0;
};

// Captured at the first call, which the library's load makes
// (library_load.cpp); the same object for the rest of the process.
const ProcessIdentity& process_identity() noexcept;

// The job's name and what named it, with `program` where nothing job-wide
// names it (Note [Which job a process belongs to]).
// Note [No path in a job's name]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A program named by its path (a script's) names its job by the file's name
// and a hash of the whole path, "train.py-1a2b3c4d@host": no directory leaks
// into telemetry labels and dashboards, the name is the same for every run
// of that script, and two scripts of one name in different directories stay
// two jobs, as a record must never be merged into another's job. "-m MODULE"
// and "-c" have no path and are kept as they are.
std::pair<std::string, std::string> job_and_source(
    const ProcessIdentity& identity,
    const std::string& program);

// When process `pid` started, in nanoseconds since the epoch (/proc's start
// time after boot plus the boot time); 0 when /proc does not say.
int64_t process_start_ns_of(pid_t pid);

} // namespace torch::autograd::device_logging::detail
