#pragma once

// Where the threads of a threading-cost measurement ran: the record's
// threading_cost.placement (Note [Where the measured threads ran]).

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace torch::autograd::device_logging::detail {

// Note [Where the measured threads ran]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The measured cost of single-threaded backward moves with where the calling
// thread and the autograd device threads (pt_autograd_<device>) run: on a
// machine with NVIDIA GPUs, a launch-bound model's estimate spread from -28%
// to +41% across free processes and from -2.6% to -3.3% with the process on
// one core. So a measured record says, under threading_cost.placement:
// - per thread (the calling thread, which started the measurement, and each
//   pt_autograd_* thread): its CPU affinity, and the CPUs it was seen on.
//   torch names its device threads from 2.3 on; with an older torch they
//   cannot be told from its other threads, and the record has the calling
//   thread only;
// - the CPU quota of the process's cgroup, in CPUs (null: none);
// - the intra-op thread count (torch.get_num_threads()) at the start.
// Only the writer thread samples (Note [The record is written off the
// backward path], record_writer.h): the /proc reads are I/O, so no thread
// that runs backward does them. It samples at every write, and the
// measurement asks for one after every pair, so "seen on" is where each
// thread last ran at the writes that followed the pairs: a sample of its
// CPUs, not every migration. The calling thread's and the intra-op count
// come from the measurement's start (start_recording_threading_cost); a new
// start drops what an earlier one saw.

// "0-3,8,10-11", as Linux writes CPU lists (Cpus_allowed_list); "" for none.
std::string cpu_list_text(const std::set<int>& cpus);

// The CPU a thread last ran on: field 39 of /proc/.../stat, whose comm
// (field 2, in parentheses) may itself hold spaces and parentheses; nullopt
// when `stat` does not hold it.
std::optional<int> last_cpu_from_stat(std::string_view stat);

// A cgroup v2 cpu.max ("max 100000", "200000 100000") or the v1 pair
// cfs_quota_us and cfs_period_us joined by a space ("-1 100000"), in CPUs;
// nullopt for no quota or text that is not one.
std::optional<double> cpu_quota_from_text(std::string_view text);

// The smallest CPU quota on the path of this process's cgroup, from its own
// to the root, in CPUs; nullopt when none is set or none can be read.
std::optional<double> cgroup_cpu_quota();

// What the writer thread has seen of the measured threads since the
// measurement started. Only the writer thread uses one.
class PlacementSamples {
 public:
  // Forgets what was seen when `start` differs from the last one given.
  void restart_if_new(unsigned start, pid_t calling_thread);
  // Reads each measured thread's affinity and last CPU, and the quota once.
  void sample();
  nlohmann::json to_json(int intra_op_threads) const;

 private:
  struct Seen {
    std::string affinity;
    std::set<int> ran_on;
  };
  void sample_thread(const std::string& name, pid_t tid);

  unsigned start_ = 0;
  pid_t calling_thread_ = 0;
  std::map<std::string, Seen> threads_;
  bool quota_read_ = false;
  std::optional<double> quota_;
};

} // namespace torch::autograd::device_logging::detail
