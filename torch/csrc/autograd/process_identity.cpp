// Who this process is (Note [A process's identity is decided once, at
// start-up], process_identity.h).

#include <torch/csrc/autograd/process_identity.h>

#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <new>
#include <sstream>
#include <tuple>

#include <unistd.h>

namespace torch::autograd::device_logging::detail {

namespace {

std::string getenv_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// A run id torchrun drew at random for a job of one node: a uuid4 where
// GROUP_WORLD_SIZE (the nodes) is 1. `--standalone` draws one, and so do
// later releases for a one-node static run given no endpoint.
bool run_id_drawn_for_one_node(const std::string& run_id) {
  if (getenv_or_empty("GROUP_WORLD_SIZE") != "1" || run_id.size() != 36) {
    return false;
  }
  for (size_t i = 0; i < run_id.size(); ++i) {
    const char c = run_id[i];
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

// Note [Which job a process belongs to]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The first of: $AUTOGRAD_DEVICE_LOGGING_JOB; torchrun's run id, unless it
// is empty, "none" (the literal a multi-node static rendezvous without
// --rdzv-id gets, which would merge every such job into one) or drawn at
// random for one node (a new job at every run: the ranks then are named like
// any other process, by what follows, and the agent passes no program on:
// Note [A child joins the job of the program that started it]); the
// scheduler's ids: SLURM's job (its array job and task where the job is an
// array), PBS's, LSF's (with its array index), a Kubernetes job name
// ($KUBERNETES_JOB_NAME, which a pod template sets from the pod's job-name
// label with the downward API); and last the program and host (the program
// that started this process, where one did: Note [A child joins the job of
// the program that started it], process_identity.h). The record
// says which one named the job (job_source). All of it as the process
// started (Note [A process's identity is decided once, at start-up]).
std::pair<std::string, std::string> job_wide_name_and_source() {
  const std::string job = getenv_or_empty("AUTOGRAD_DEVICE_LOGGING_JOB");
  if (!job.empty()) {
    return {job, "AUTOGRAD_DEVICE_LOGGING_JOB"};
  }
  const std::string run_id = getenv_or_empty("TORCHELASTIC_RUN_ID");
  if (!run_id.empty() && run_id != "none" &&
      !run_id_drawn_for_one_node(run_id)) {
    return {run_id, "torchrun"};
  }
  const std::string slurm = getenv_or_empty("SLURM_JOB_ID");
  if (!slurm.empty()) {
    const std::string array_job = getenv_or_empty("SLURM_ARRAY_JOB_ID");
    const std::string task = getenv_or_empty("SLURM_ARRAY_TASK_ID");
    return {
        "slurm-" +
            (!array_job.empty() && !task.empty() ? array_job + "_" + task
                                                 : slurm),
        "slurm"};
  }
  const std::string pbs = getenv_or_empty("PBS_JOBID");
  if (!pbs.empty()) {
    return {"pbs-" + pbs, "pbs"};
  }
  const std::string lsf = getenv_or_empty("LSB_JOBID");
  if (!lsf.empty()) {
    const std::string index = getenv_or_empty("LSB_JOBINDEX");
    return {
        "lsf-" + lsf + (!index.empty() && index != "0" ? "_" + index : ""),
        "lsf"};
  }
  const std::string kubernetes = getenv_or_empty("KUBERNETES_JOB_NAME");
  if (!kubernetes.empty()) {
    return {"k8s-" + kubernetes, "kubernetes"};
  }
  return {"", "program"};
}

// "rank" (RANK is set), "agent" (torchrun's elastic agent, which imports
// torch but runs no training itself), or "other".
std::string role() {
  if (!getenv_or_empty("RANK").empty()) {
    return "rank";
  }
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0')) {
    const size_t slash = arg.rfind('/');
    const std::string base =
        slash == std::string::npos ? arg : arg.substr(slash + 1);
    if (base == "torchrun" || arg == "torch.distributed.run" ||
        arg.find("torch/distributed/run.py") != std::string::npos) {
      return "agent";
    }
  }
  return "other";
}

ProcessIdentity capture() {
  ProcessIdentity identity;
  identity.host = host_name();
  std::tie(identity.job, identity.job_source) = job_wide_name_and_source();
  identity.inherited_program =
      getenv_or_empty("AUTOGRAD_DEVICE_LOGGING_PROGRAM");
  identity.role = role();
  identity.rank = getenv_or_empty("RANK");
  identity.local_rank = getenv_or_empty("LOCAL_RANK");
  identity.world_size = getenv_or_empty("WORLD_SIZE");
  identity.parent_pid = getppid();
  identity.parent_start_ns = process_start_ns_of(identity.parent_pid);
  return identity;
}

} // namespace

const ProcessIdentity& process_identity() noexcept {
  static const ProcessIdentity* identity = []() -> const ProcessIdentity* {
    try {
      return new ProcessIdentity(capture());
    } catch (...) {
      return new (std::nothrow) ProcessIdentity();
    }
  }();
  static const ProcessIdentity empty;
  return identity != nullptr ? *identity : empty;
}

namespace {

// Note [No path in a job's name] (process_identity.h).
std::string program_without_path(const std::string& program) {
  const size_t slash = program.rfind('/');
  if (slash == std::string::npos) {
    return program;
  }
  // FNV-1a, 32 bits, of the whole program as given.
  uint32_t hash = 2166136261u;
  for (const char c : program) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", hash);
  return program.substr(slash + 1) + "-" + hex;
}

} // namespace

std::pair<std::string, std::string> job_and_source(
    const ProcessIdentity& identity,
    const std::string& program) {
  if (!identity.job.empty()) {
    return {identity.job, identity.job_source};
  }
  return {
      program_without_path(
          identity.inherited_program.empty() ? program
                                             : identity.inherited_program) +
          "@" + identity.host,
      "program"};
}

int64_t process_start_ns_of(pid_t pid) {
  if (pid <= 0) {
    return 0;
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 > text.size()) {
    return 0;
  }
  // Field 22 (starttime) is the 20th after the command's closing paren.
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  for (int i = 0; i < 20 && fields >> field; ++i) {
  }
  std::ifstream boot("/proc/stat");
  std::string key;
  long long btime = -1;
  while (boot >> key) {
    if (key == "btime") {
      boot >> btime;
      break;
    }
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  char* end = nullptr;
  const long long started = std::strtoll(field.c_str(), &end, 10);
  if (btime < 0 || ticks <= 0 || end == field.c_str()) {
    return 0;
  }
  return btime * 1000000000LL + started * (1000000000LL / ticks);
}

} // namespace torch::autograd::device_logging::detail
