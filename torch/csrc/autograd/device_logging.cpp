// State, activation checks and the per-pass entry point of the autograd
// device-logging patch. The engine seam itself is in engine.cpp.

#include <torch/csrc/autograd/engine.h>

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/device_logging.h>
#include <torch/csrc/autograd/device_stats.h>
#include <torch/csrc/autograd/graph_task.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <caffe2/core/common.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#ifdef AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH_OVERRIDE
// Test builds pretend to be built for another torch to exercise the mismatch
// path without a second torch installation.
#define AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH \
  AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH_OVERRIDE
#else
#define AUTOGRAD_DEVICE_LOGGING_STRINGIFY_(x) #x
#define AUTOGRAD_DEVICE_LOGGING_STRINGIFY(x) \
  AUTOGRAD_DEVICE_LOGGING_STRINGIFY_(x)
// clang-format off
#define AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH            \
  AUTOGRAD_DEVICE_LOGGING_STRINGIFY(TORCH_VERSION_MAJOR)   \
  "." AUTOGRAD_DEVICE_LOGGING_STRINGIFY(TORCH_VERSION_MINOR) \
  "." AUTOGRAD_DEVICE_LOGGING_STRINGIFY(TORCH_VERSION_PATCH)
// clang-format on
#endif

namespace torch::autograd::device_logging {
namespace {

// Itanium mangling of
// torch::autograd::Engine::compute_dependencies(Node*, GraphTask&, uint64_t);
// engine.cpp pins the member function's type with a static_assert so that
// this name cannot drift from the definition it names.
// clang-format off
constexpr const char* kComputeDependenciesSymbol =
    "_ZN5torch8autograd6Engine20compute_dependenciesEPNS0_4NodeERNS0_9GraphTaskEm";
// clang-format on

// Note [Device logging state]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// detail::state holds one bit per BackwardDeviceEvent that needs no further
// inspection (the event was emitted, or the library is disabled), a bit for
// the opt-in statistics, one for "disabled" and one for "the hook has run".
// After libtorch's walk, engine.cpp does one relaxed load of it; when it is
// exactly kNothingLeftToLog (both events done, the hook has run, statistics
// off, not disabled), the pass ends there. Relaxed ordering is enough: a pass
// that reads a stale value merely inspects nodes once more and then loses the
// fetch_or race, which still emits each event exactly once.
using detail::state;
constexpr uint8_t kStatsEnabled = detail::kStateStatsEnabled;
constexpr uint8_t kDisabled = detail::kStateDisabled;
static_assert(detail::kStateMultiDeviceDone == kMultiDeviceBackward);
static_assert(detail::kStateGpuCpuDone == kGpuCpuBackward);
std::atomic<uint8_t> events_emitted{0};
std::atomic<uint64_t> nodes_inspected{0};
// Set once, before disable() marks the state disabled; never freed.
std::atomic<const std::string*> disabled_reason{nullptr};

// Emits warnings to stderr through c10's default handler even when a thread
// local handler (Python's, which may turn warnings into errors) is installed:
// a message from this library must never fail a backward pass.
// Each caller runs at most once per process (the load-time checks, and
// disable(), which only the first reason gets through), so every distinct
// message is printed once; a TORCH_WARN_ONCE here would print only the first
// of them.
void warn_to_stderr(const std::string& message) noexcept {
  try {
    static c10::WarningHandler stderr_handler;
    c10::WarningUtils::WarningHandlerGuard guard(&stderr_handler);
    TORCH_WARN(message);
  } catch (...) {
  }
}

void disable(const std::string& reason) noexcept {
  try {
    const std::string* owned = new std::string(reason);
    const std::string* expected = nullptr;
    if (!disabled_reason.compare_exchange_strong(expected, owned)) {
      delete owned;
      return;
    }
    state.fetch_or(
        kAllBackwardDeviceEvents | kDisabled, std::memory_order_release);
    warn_to_stderr(
        "autograd_device_logging is disabled: " + reason +
        " Backward passes are unaffected; only the device logging is off.");
  } catch (...) {
    state.fetch_or(
        kAllBackwardDeviceEvents | kDisabled, std::memory_order_release);
  }
}

// Path of the loaded object that contains `address`, or "" if none does.
std::string object_path_of(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  return info.dli_fname;
}

const std::string& this_library_path() {
  static const std::string path =
      object_path_of(reinterpret_cast<const void*>(&disable));
  return path;
}

// Note [Finding libtorch's compute_dependencies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The patched definition forwards to the next definition in lookup order
// (dlsym(RTLD_NEXT)), the usual interposition idiom, which also lets another
// interposer stack with this one. When this library is not ahead of libtorch
// in the lookup order (loaded late, or into a local scope), RTLD_NEXT can
// miss; then the definition is taken from libtorch_cpu's own handle, found
// through an address known to be inside it.
ComputeDependenciesFn resolve_libtorch_compute_dependencies() noexcept {
  void* next = dlsym(RTLD_NEXT, kComputeDependenciesSymbol);
  if (next != nullptr && object_path_of(next) != this_library_path()) {
    return reinterpret_cast<ComputeDependenciesFn>(next);
  }
  const std::string libtorch_cpu = object_path_of(
      reinterpret_cast<const void*>(&Engine::get_default_engine));
  if (libtorch_cpu.empty()) {
    return nullptr;
  }
  void* handle = dlopen(libtorch_cpu.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) {
    return nullptr;
  }
  // A handle lookup searches the object itself first, i.e. libtorch_cpu's
  // own definition. The handle stays open: libtorch_cpu outlives us anyway.
  void* own = dlsym(handle, kComputeDependenciesSymbol);
  return own == nullptr ? nullptr
                        : reinterpret_cast<ComputeDependenciesFn>(own);
}

// "major.minor.patch" of the running libtorch, from its build options.
std::string running_torch_version() {
  try {
    const auto& options = caffe2::GetBuildOptions();
    const auto it = options.find("TORCH_VERSION");
    if (it == options.end()) {
      return {};
    }
    const std::string& full = it->second;
    return full.substr(0, full.find_first_not_of("0123456789."));
  } catch (...) {
    return {};
  }
}

// Note [The preload ends with the process that asked for it]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// LD_PRELOAD=libautograd_device_logging.so is inherited by every child
// process, and each would then load this library and libtorch_cpu with it:
// the compilers torch.compile spawns, shell tools, anything. So when this
// library finds itself in LD_PRELOAD, it removes itself from the variable
// (keeping other entries) while the process is still single-threaded, before
// main(); the process that asked for it keeps it, its children do not.
bool names_this_library(const std::string& entry) {
  if (entry.empty()) {
    return false;
  }
  const std::string& self = this_library_path();
  if (entry == self) {
    return true;
  }
  char* resolved = realpath(entry.c_str(), nullptr);
  char* resolved_self = realpath(self.c_str(), nullptr);
  const bool same = resolved != nullptr && resolved_self != nullptr &&
      std::strcmp(resolved, resolved_self) == 0;
  std::free(resolved);
  std::free(resolved_self);
  return same;
}

void remove_this_library_from_ld_preload() {
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr) {
    return;
  }
  // ld.so separates entries by spaces or colons.
  std::string kept;
  bool removed = false;
  const std::string value = preload;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t end = std::min(value.find_first_of(": ", start), value.size());
    const std::string entry = value.substr(start, end - start);
    if (names_this_library(entry)) {
      removed = true;
    } else if (!entry.empty()) {
      kept += (kept.empty() ? "" : ":") + entry;
    }
    start = end + 1;
  }
  if (!removed) {
    return;
  }
  if (kept.empty()) {
    unsetenv("LD_PRELOAD");
  } else {
    setenv("LD_PRELOAD", kept.c_str(), /*overwrite=*/1);
  }
}

// Note [Which libtorch this library may inspect]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The classifier reads GraphTask::nodes_in_graph_ and Node's input metadata
// through the layouts of the headers it was compiled with. Another libtorch
// release may lay them out differently, so anything but the same
// major.minor.patch disables the classifier; the forwarding to libtorch's
// own compute_dependencies needs no layout and keeps working. Builds against
// a torch that logs these events itself are refused at compile time
// (engine.cpp), and such a torch never matches a supported build here.
void check_at_load() noexcept {
  try {
    remove_this_library_from_ld_preload();
    const char* stats_env = std::getenv("PYTORCH_AUTOGRAD_DEVICE_STATS");
    if (stats_env != nullptr && std::strcmp(stats_env, "1") == 0) {
      enable_backward_device_stats(true);
    }
    detail::libtorch_compute_dependencies =
        resolve_libtorch_compute_dependencies();
    if (detail::libtorch_compute_dependencies == nullptr) {
      disable(
          "libtorch's torch::autograd::Engine::compute_dependencies was not "
          "found.");
      return;
    }
    const std::string built = AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH;
    const std::string running = running_torch_version();
    if (running != built) {
      disable(
          "it was built for torch " + built + " but this process runs torch " +
          (running.empty() ? std::string("of unknown version") : running) +
          ". Rebuild it against the installed torch (pip install "
          "--no-build-isolation --force-reinstall <autograd_device_logging "
          "source>, or a CMake build with that torch).");
      return;
    }
    void* first = dlsym(RTLD_DEFAULT, kComputeDependenciesSymbol);
    const std::string first_path = object_path_of(first);
    if (first != nullptr && first_path != this_library_path()) {
      warn_to_stderr(
          "autograd_device_logging is loaded, but the first "
          "Engine::compute_dependencies in lookup order is the one in " +
          first_path +
          ", so backward passes will not be logged. Link "
          "autograd_device_logging before torch (C++), or import "
          "autograd_device_logging before torch (Python).");
    }
  } catch (...) {
    disable("its load-time checks failed.");
  }
}

// Runs the checks when the dynamic linker initializes this library, i.e.
// after libtorch (a dependency) is initialized and before any backward pass
// in a program that links it.
[[maybe_unused]] const bool checked_at_load = (check_at_load(), true);

// Note [Skipping processes without accelerators]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A node can only be routed to an accelerator's ready queue if a device guard
// implementation for that type reports at least one device: the engine sizes
// its device queues from exactly these counts and cannot run such a node
// otherwise. So when no registered non-CPU-queue device type reports a device,
// neither event can fire and the pass needs no inspection. The scan is a
// fixed number of atomic loads plus one virtual call per registered backend
// (CUDA's count is cached by c10), i.e. O(1) per pass, and it is not cached
// across passes because a backend may register itself later (a Python import
// or dlopen of an out-of-tree device).
bool process_has_accelerator_devices() noexcept {
  for (size_t i = 0; i < c10::impl::device_guard_impl_registry.size(); ++i) {
    const auto type = static_cast<c10::DeviceType>(i);
    if (runs_on_cpu_ready_queue(type)) {
      continue;
    }
    const c10::impl::DeviceGuardImplInterface* impl =
        c10::impl::device_guard_impl_registry[i].load(
            std::memory_order_relaxed);
    if (impl != nullptr && impl->deviceCount() > 0) {
      return true;
    }
  }
  return false;
}

void emit(uint8_t decided) {
  if (decided == kNoBackwardDeviceEvent) {
    return;
  }
  const uint8_t newly =
      decided & ~state.fetch_or(decided, std::memory_order_relaxed);
  if (newly == kNoBackwardDeviceEvent) {
    return;
  }
  events_emitted.fetch_or(newly, std::memory_order_relaxed);
  if (newly & kMultiDeviceBackward) {
    C10_LOG_API_USAGE_ONCE(kMultiDeviceBackwardEventName);
  }
  if (newly & kGpuCpuBackward) {
    C10_LOG_API_USAGE_ONCE(kGpuCpuBackwardEventName);
  }
}

// Opt-in statistics (device_stats.h). Counters are only touched while the
// statistics are on.
std::array<std::atomic<uint64_t>, kNumBackwardDeviceClasses> passes_by_class{};
std::atomic<int64_t> max_accelerators_in_one_pass{0};

void record_pass(BackwardDeviceClass device_class, int num_accelerators) {
  passes_by_class[static_cast<size_t>(device_class)].fetch_add(
      1, std::memory_order_relaxed);
  int64_t seen = max_accelerators_in_one_pass.load(std::memory_order_relaxed);
  while (num_accelerators > seen &&
         !max_accelerators_in_one_pass.compare_exchange_weak(
             seen, num_accelerators, std::memory_order_relaxed)) {
  }
}

void print_stats_at_exit() {
  const BackwardDeviceStats stats = backward_device_stats();
  if (stats.enabled) {
    std::fprintf(stderr, "%s\n", format_backward_device_stats(stats).c_str());
  }
}

} // namespace

namespace {
std::atomic<ClassifierFaultForTesting> classifier_fault_for_testing{nullptr};
} // namespace

namespace detail {
ComputeDependenciesFn libtorch_compute_dependencies = nullptr;
std::atomic<uint8_t> state{0};
} // namespace detail

void log_backward_devices(const Node* root, const GraphTask& task) noexcept {
  uint8_t current = state.load(std::memory_order_relaxed);
  if (!(current & detail::kStateHookHasRun)) {
    current =
        state.fetch_or(detail::kStateHookHasRun, std::memory_order_relaxed) |
        detail::kStateHookHasRun;
  }
  if ((current & kAllBackwardDeviceEvents) == kAllBackwardDeviceEvents &&
      !(current & kStatsEnabled)) {
    return;
  }
  if (current & kDisabled) {
    return;
  }
  const uint8_t pending = kAllBackwardDeviceEvents & ~current;
  const bool stats = current & kStatsEnabled;
  try {
    if (!process_has_accelerator_devices()) {
      if (stats) {
        record_pass(BackwardDeviceClass::kCpuOnly, 0);
      }
      return;
    }
    if (const ClassifierFaultForTesting fault =
            classifier_fault_for_testing.load(std::memory_order_relaxed)) {
      fault();
    }
    if (stats) {
      const PassDeviceCensus census =
          census_backward_pass(root, task.nodes_in_graph_);
      nodes_inspected.fetch_add(
          census.nodes_inspected, std::memory_order_relaxed);
      record_pass(census.device_class(), census.num_accelerators);
      emit(census.events() & pending);
      return;
    }
    const PassDeviceSummary summary =
        classify_backward_pass(root, task.nodes_in_graph_, pending);
    nodes_inspected.fetch_add(
        summary.nodes_inspected, std::memory_order_relaxed);
    emit(summary.events() & pending);
  } catch (const c10::Error& e) {
    // Without the C++ backtrace that what() appends: one line is enough.
    disable(
        std::string("classifying a backward pass failed: ") +
        e.what_without_backtrace());
  } catch (const std::exception& e) {
    disable(std::string("classifying a backward pass failed: ") + e.what());
  } catch (...) {
    disable("classifying a backward pass failed.");
  }
}

void set_classifier_fault_for_testing(
    ClassifierFaultForTesting fault) noexcept {
  classifier_fault_for_testing.store(fault, std::memory_order_relaxed);
}

void enable_backward_device_stats(bool enabled) {
  if (enabled) {
    static const bool registered = (std::atexit(&print_stats_at_exit), true);
    (void)registered;
    state.fetch_or(kStatsEnabled, std::memory_order_relaxed);
  } else {
    state.fetch_and(
        static_cast<uint8_t>(~kStatsEnabled), std::memory_order_relaxed);
  }
}

BackwardDeviceStats backward_device_stats() {
  BackwardDeviceStats stats;
  stats.enabled = state.load(std::memory_order_relaxed) & kStatsEnabled;
  const auto count = [](BackwardDeviceClass c) {
    return passes_by_class[static_cast<size_t>(c)].load(
        std::memory_order_relaxed);
  };
  stats.cpu_only = count(BackwardDeviceClass::kCpuOnly);
  stats.single_accelerator = count(BackwardDeviceClass::kSingleAccelerator);
  stats.accelerator_cpu = count(BackwardDeviceClass::kAcceleratorCpu);
  stats.multi_accelerator = count(BackwardDeviceClass::kMultiAccelerator);
  stats.max_accelerators_in_one_pass =
      max_accelerators_in_one_pass.load(std::memory_order_relaxed);
  return stats;
}

void reset_backward_device_stats() {
  for (auto& counter : passes_by_class) {
    counter.store(0, std::memory_order_relaxed);
  }
  max_accelerators_in_one_pass.store(0, std::memory_order_relaxed);
}

std::string format_backward_device_stats(const BackwardDeviceStats& stats) {
  return "autograd device stats: " + std::to_string(stats.passes()) +
      " backward passes: cpu_only=" + std::to_string(stats.cpu_only) +
      " single_accelerator=" + std::to_string(stats.single_accelerator) +
      " accelerator_cpu=" + std::to_string(stats.accelerator_cpu) +
      " multi_accelerator=" + std::to_string(stats.multi_accelerator) +
      " max_accelerators_in_one_pass=" +
      std::to_string(stats.max_accelerators_in_one_pass);
}

DeviceLoggingStatus device_logging_status() {
  DeviceLoggingStatus status;
  status.hook_has_run =
      state.load(std::memory_order_relaxed) & detail::kStateHookHasRun;
  status.events_emitted = events_emitted.load(std::memory_order_relaxed);
  status.nodes_inspected = nodes_inspected.load(std::memory_order_relaxed);
  if (const std::string* reason =
          disabled_reason.load(std::memory_order_acquire)) {
    status.disabled_reason = *reason;
  }
  status.built_for_torch = AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH;
  status.running_torch = running_torch_version();
  return status;
}

} // namespace torch::autograd::device_logging

namespace device_logging = torch::autograd::device_logging;

extern "C" {

int autograd_device_logging_hook_has_run(void) {
  return device_logging::device_logging_status().hook_has_run ? 1 : 0;
}

unsigned autograd_device_logging_events_emitted(void) {
  return device_logging::device_logging_status().events_emitted;
}

uint64_t autograd_device_logging_nodes_inspected(void) {
  return device_logging::device_logging_status().nodes_inspected;
}

const char* autograd_device_logging_disabled_reason(void) {
  const std::string* reason =
      device_logging::disabled_reason.load(std::memory_order_acquire);
  return reason != nullptr ? reason->c_str() : nullptr;
}

const char* autograd_device_logging_built_for_torch(void) {
  return AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH;
}

int autograd_device_logging_inject_classifier_fault_for_testing(int kind) {
  using device_logging::set_classifier_fault_for_testing;
  switch (kind) {
    case 0:
      set_classifier_fault_for_testing(nullptr);
      return 0;
    case 1:
      set_classifier_fault_for_testing(
          [] { TORCH_CHECK(false, "injected classifier fault"); });
      return 0;
    case 2:
      set_classifier_fault_for_testing([] { throw std::bad_alloc(); });
      return 0;
    case 3:
      set_classifier_fault_for_testing([] { throw 42; });
      return 0;
    default:
      return -1;
  }
}

int autograd_device_logging_stats(uint64_t out[5]) {
  const auto stats = device_logging::backward_device_stats();
  out[0] = stats.cpu_only;
  out[1] = stats.single_accelerator;
  out[2] = stats.accelerator_cpu;
  out[3] = stats.multi_accelerator;
  out[4] = static_cast<uint64_t>(stats.max_accelerators_in_one_pass);
  return stats.enabled ? 1 : 0;
}

void autograd_device_logging_enable_stats(int enabled) {
  device_logging::enable_backward_device_stats(enabled != 0);
}

void autograd_device_logging_reset_stats(void) {
  device_logging::reset_backward_device_stats();
}

const char* autograd_device_logging_running_torch(void) {
  static const std::string running = device_logging::running_torch_version();
  return running.c_str();
}

} // extern "C"
