// Where the measured threads ran (Note [Where the measured threads ran]).

#include <torch/csrc/autograd/thread_placement.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <dirent.h>
#include <sched.h>

namespace torch::autograd::device_logging::detail {

namespace {

// The prefix of the autograd engine's device threads' names.
constexpr std::string_view kDeviceThreadPrefix = "pt_autograd_";
// The calling thread's name in the record.
constexpr const char* kCallingThread = "calling";

// The file's first line; "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<long long> whole_number(std::string_view text) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return value;
}

// The CPUs `tid` may run on; empty when it cannot be read (the thread ended).
std::set<int> affinity_of(pid_t tid) {
  std::set<int> cpus;
  // Sized for any CPU count the kernel may report.
  const int max_cpus = 8192;
  cpu_set_t* set = CPU_ALLOC(max_cpus);
  if (set == nullptr) {
    return cpus;
  }
  const size_t size = CPU_ALLOC_SIZE(max_cpus);
  if (sched_getaffinity(tid, size, set) == 0) {
    for (int cpu = 0; cpu < max_cpus; ++cpu) {
      if (CPU_ISSET_S(cpu, size, set)) {
        cpus.insert(cpu);
      }
    }
  }
  CPU_FREE(set);
  return cpus;
}

} // namespace

std::string cpu_list_text(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    for (++it; it != cpus.end() && *it == last + 1; ++it) {
      last = *it;
    }
    if (!out.empty()) {
      out += ',';
    }
    out += std::to_string(first);
    if (last != first) {
      out += '-' + std::to_string(last);
    }
  }
  return out;
}

std::optional<int> last_cpu_from_stat(std::string_view stat) {
  // The comm may hold ") ", so the fields start after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) {
    return std::nullopt;
  }
  std::string_view rest = stat.substr(close + 1);
  // rest holds fields 3, 4, ...: field 39 is its 37th.
  int field = 2;
  size_t pos = 0;
  while (pos < rest.size()) {
    while (pos < rest.size() && rest[pos] == ' ') {
      ++pos;
    }
    if (pos == rest.size()) {
      break;
    }
    const size_t end = std::min(rest.find(' ', pos), rest.size());
    if (++field == 39) {
      const auto cpu = whole_number(rest.substr(pos, end - pos));
      if (!cpu || *cpu < 0 || *cpu > 1 << 20) {
        return std::nullopt;
      }
      return static_cast<int>(*cpu);
    }
    pos = end;
  }
  return std::nullopt;
}

std::optional<double> cpu_quota_from_text(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) {
    return std::nullopt;
  }
  const auto quota = whole_number(text.substr(0, space));
  const auto period = whole_number(text.substr(space + 1));
  // "max" (v2) and -1 (v1) are no quota.
  if (!quota || !period || *quota <= 0 || *period <= 0) {
    return std::nullopt;
  }
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

std::optional<double> cgroup_cpu_quota() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  std::optional<double> smallest;
  auto consider = [&](std::optional<double> quota) {
    if (quota && (!smallest || *quota < *smallest)) {
      smallest = quota;
    }
  };
  while (std::getline(cgroups, line)) {
    // "0::/path" (v2), "4:cpu,cpuacct:/path" (v1).
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) {
      continue;
    }
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    std::string root;
    bool v2 = controllers.empty();
    if (v2) {
      root = "/sys/fs/cgroup";
    } else {
      std::stringstream names(controllers);
      std::string name;
      bool cpu = false;
      while (std::getline(names, name, ',')) {
        cpu = cpu || name == "cpu";
      }
      if (!cpu) {
        continue;
      }
      root = "/sys/fs/cgroup/" + controllers;
    }
    // From the process's cgroup up to the root: any of them may limit it.
    while (true) {
      const std::string dir = root + (path == "/" ? "" : path);
      consider(
          v2 ? cpu_quota_from_text(first_line(dir + "/cpu.max"))
             : cpu_quota_from_text(
                   first_line(dir + "/cpu.cfs_quota_us") + " " +
                   first_line(dir + "/cpu.cfs_period_us")));
      if (path.empty() || path == "/") {
        break;
      }
      const size_t slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  return smallest;
}

void PlacementSamples::restart_if_new(unsigned start, pid_t calling_thread) {
  if (start != start_) {
    start_ = start;
    calling_thread_ = calling_thread;
    threads_.clear();
  }
}

void PlacementSamples::sample_thread(const std::string& name, pid_t tid) {
  const std::set<int> affinity = affinity_of(tid);
  if (affinity.empty()) {
    return; // the thread is gone
  }
  Seen& seen = threads_[name];
  seen.affinity = cpu_list_text(affinity);
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  if (const auto cpu = last_cpu_from_stat(first_line(path))) {
    seen.ran_on.insert(*cpu);
  }
}

void PlacementSamples::sample() {
  if (!quota_read_) {
    quota_read_ = true;
    quota_ = cgroup_cpu_quota();
  }
  if (calling_thread_ > 0) {
    sample_thread(kCallingThread, calling_thread_);
  }
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) {
    return;
  }
  while (const dirent* entry = readdir(tasks)) {
    const auto tid = whole_number(entry->d_name);
    if (!tid || *tid <= 0) {
      continue;
    }
    const std::string comm =
        first_line("/proc/self/task/" + std::string(entry->d_name) + "/comm");
    if (comm.rfind(kDeviceThreadPrefix, 0) == 0) {
      sample_thread(comm, static_cast<pid_t>(*tid));
    }
  }
  closedir(tasks);
}

nlohmann::json PlacementSamples::to_json(int intra_op_threads) const {
  nlohmann::json threads = nlohmann::json::object();
  for (const auto& [name, seen] : threads_) {
    threads[name] = {
        {"affinity", seen.affinity}, {"ran_on", cpu_list_text(seen.ran_on)}};
  }
  return {
      {"threads", std::move(threads)},
      {"cpu_quota", quota_ ? nlohmann::json(*quota_) : nlohmann::json()},
      {"intra_op_threads", intra_op_threads}};
}

} // namespace torch::autograd::device_logging::detail
