// Interposition of the autograd device-logging patch: finds libtorch's own
// Engine::compute_dependencies and Engine::ready_queue, and holds the load-time
// checks (LD_PRELOAD hygiene, the torch version, the lookup order) that
// library_load.cpp runs when the dynamic linker initializes the library.

#include <torch/csrc/autograd/interposition.h>

#include <torch/csrc/autograd/engine.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/settings.h>
#include <torch/csrc/autograd/torch_build_identity.h>

#include <torch/version.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

// The identity of the torch build this library is compiled against, beyond
// its release: CMake reads it from that installation (CMakeLists.txt).
#ifndef AUTOGRAD_DEVICE_LOGGING_TORCH_BUILD_VERSION
#error \
    "CMake defines AUTOGRAD_DEVICE_LOGGING_TORCH_BUILD_VERSION, _COMMIT and _CXX11_ABI"
#endif

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

namespace detail {

ComputeDependenciesFn libtorch_compute_dependencies = nullptr;
ReadyQueueFn libtorch_ready_queue = nullptr;

namespace {
// Set once at load, before any other thread can read it.
bool preloaded = false;
} // namespace

bool loaded_by_preload() noexcept {
  return preloaded;
}

const char* built_for_torch() noexcept {
  return AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH;
}

// Test builds override parts of the identity, as they do the release.
TorchBuildIdentity built_for_torch_identity() {
  TorchBuildIdentity identity;
  identity.release = AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH;
#ifdef AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_TORCH_OVERRIDE
  identity.version = identity.release;
#else
  identity.version = AUTOGRAD_DEVICE_LOGGING_TORCH_BUILD_VERSION;
  identity.commit = AUTOGRAD_DEVICE_LOGGING_TORCH_BUILD_COMMIT;
#endif
  identity.cxx11_abi = AUTOGRAD_DEVICE_LOGGING_TORCH_BUILD_CXX11_ABI;
#ifdef AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_BUILD_OVERRIDE
  identity.version = AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_BUILD_OVERRIDE;
  identity.commit = AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_COMMIT_OVERRIDE;
#endif
#ifdef AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_CXX11_ABI_OVERRIDE
  identity.cxx11_abi = AUTOGRAD_DEVICE_LOGGING_BUILT_FOR_CXX11_ABI_OVERRIDE;
#endif
  return identity;
}

// Note [Strings the exit handlers read are leaked]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The per-process record is written by an atexit handler, registered before
// these strings are first built. Exit runs handlers and static destructors
// in reverse order of registration, so a function-local static std::string
// would be destroyed before the handler reads it: with the C++11 string ABI
// the bytes are usually still there, with the pre-C++11 one (torch 2.4.1's
// wheels) the copy throws std::bad_alloc. So both live as long as the
// process.
const std::string& running_torch_version() noexcept {
  static const std::string* const version =
      new std::string(running_torch_identity(/*libtorch_cpu_path=*/"").release);
  return *version;
}

} // namespace detail

namespace {

// Itanium mangling of
// torch::autograd::Engine::compute_dependencies(Node*, GraphTask&, uint64_t);
// engine.cpp pins the member function's type with a static_assert so that
// this name cannot drift from the definition it names.
#ifdef AUTOGRAD_DEVICE_LOGGING_COMPUTE_DEPENDENCIES_SYMBOL_OVERRIDE
// Test builds look for a name libtorch does not define, to exercise
// Note [When libtorch's compute_dependencies cannot be found] (engine.cpp).
constexpr const char* kComputeDependenciesSymbol =
    AUTOGRAD_DEVICE_LOGGING_COMPUTE_DEPENDENCIES_SYMBOL_OVERRIDE;
#else
// clang-format off
constexpr const char* kComputeDependenciesSymbol =
    "_ZN5torch8autograd6Engine20compute_dependenciesEPNS0_4NodeERNS0_9GraphTaskEm";
// clang-format on
#endif

// Itanium mangling of torch::autograd::Engine::ready_queue(
// std::shared_ptr<ReadyQueue>, c10::Device); engine.cpp pins its type too.
// clang-format off
constexpr const char* kReadyQueueSymbol =
    "_ZN5torch8autograd6Engine11ready_queueESt10shared_ptrINS0_10ReadyQueueEEN3c106DeviceE";
// clang-format on

// Path of the loaded object that contains `address`, or "" if none does.
std::string object_path_of(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  return info.dli_fname;
}

// Leaked (Note [Strings the exit handlers read are leaked]).
const std::string& this_library_path() {
  static const std::string* const path = new std::string(
      object_path_of(reinterpret_cast<const void*>(&object_path_of)));
  return *path;
}

// The file of the libtorch_cpu this library runs with.
std::string libtorch_cpu_path() {
  return object_path_of(
      reinterpret_cast<const void*>(&Engine::get_default_engine));
}

} // namespace

const std::string& detail::library_file() noexcept {
  return this_library_path();
}

namespace {

// Note [Finding libtorch's compute_dependencies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The patched definition forwards to the next definition in lookup order
// (dlsym(RTLD_NEXT)), the usual interposition idiom, which also lets another
// interposer stack with this one. When this library is not ahead of libtorch
// in the lookup order (loaded late, or into a local scope), RTLD_NEXT can
// miss; then the definition is taken from libtorch_cpu's own handle, found
// through an address known to be inside it.
void* resolve_libtorch_definition(const char* symbol) noexcept {
  void* next = dlsym(RTLD_NEXT, symbol);
  if (next != nullptr && object_path_of(next) != this_library_path()) {
    return next;
  }
  const std::string libtorch_cpu = libtorch_cpu_path();
  if (libtorch_cpu.empty()) {
    return nullptr;
  }
  void* handle = dlopen(libtorch_cpu.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) {
    return nullptr;
  }
  // A handle lookup searches the object itself first, i.e. libtorch_cpu's
  // own definition. The handle stays open: libtorch_cpu outlives us anyway.
  return dlsym(handle, symbol);
}

// Note [Finding libtorch's ready_queue]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Engine::ready_queue returns a std::shared_ptr by value, so its caller
// passes a hidden return slot, which the Itanium C++ ABI places relative to
// `this` differently on different targets. Rather than spell that out in a
// plain function pointer, the address is made into a pointer to member
// function, whose Itanium representation for a non-virtual member is the
// pair {address, this-adjustment 0} on every target; calls through it are
// then laid out by the compiler exactly as libtorch's own calls are.
ReadyQueueFn ready_queue_at(void* address) noexcept {
  ReadyQueueFn fn = nullptr;
  if (address == nullptr) {
    return fn;
  }
  struct NonVirtualMemberPointer {
    void* address;
    std::ptrdiff_t this_adjustment;
  };
  static_assert(sizeof(ReadyQueueFn) == sizeof(NonVirtualMemberPointer));
  static_assert(std::is_trivially_copyable_v<ReadyQueueFn>);
  const NonVirtualMemberPointer representation{address, 0};
  std::memcpy(&fn, &representation, sizeof(fn));
  return fn;
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

// Returns whether LD_PRELOAD named this library.
bool remove_this_library_from_ld_preload() {
  const std::string& preload = detail::settings().ld_preload;
  if (preload.empty()) {
    return false;
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
    return false;
  }
  if (kept.empty()) {
    unsetenv("LD_PRELOAD");
  } else {
    setenv("LD_PRELOAD", kept.c_str(), /*overwrite=*/1);
  }
  return true;
}

// Note [Which libtorch this library may inspect]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The classifier reads GraphTask::nodes_in_graph_ and Node's input metadata
// through the layouts of the headers it was compiled with. Another build of
// torch may lay them out differently, so anything but the build it was made
// for disables the classifier (Note [A build runs only on the torch build it
// was made for], torch_build_identity.h); the forwarding to libtorch's own
// compute_dependencies needs no layout and keeps working. Builds against a
// torch that logs these events itself classify and leave the logging to it
// (Note [Where torch logs the events itself]).
} // namespace

void detail::check_interposition_at_load() noexcept {
  try {
    // Read while libtorch is alive: the record's exit handler reads it after
    // libtorch's statics may be gone (at::show_config() then crashes, as it
    // did on 2.0.1), so it must be cached now, whatever the checks decide.
    (void)detail::running_torch_version();
    detail::preloaded = remove_this_library_from_ld_preload();
    detail::libtorch_compute_dependencies =
        reinterpret_cast<ComputeDependenciesFn>(
            resolve_libtorch_definition(kComputeDependenciesSymbol));
    detail::libtorch_ready_queue =
        ready_queue_at(resolve_libtorch_definition(kReadyQueueSymbol));
    if (detail::libtorch_compute_dependencies == nullptr) {
      detail::disable(
          "libtorch's torch::autograd::Engine::compute_dependencies was not "
          "found.");
      return;
    }
    if (detail::libtorch_ready_queue == nullptr) {
      detail::disable(
          "libtorch's torch::autograd::Engine::ready_queue was not found.");
      return;
    }
    const std::string mismatch = detail::build_mismatch(
        detail::built_for_torch_identity(),
        detail::running_torch_identity(libtorch_cpu_path()));
    if (!mismatch.empty()) {
      detail::disable(
          mismatch +
          " Rebuild it against the installed torch (pip install "
          "--no-build-isolation --force-reinstall <autograd_device_logging "
          "source>, or a CMake build with that torch).");
      return;
    }
    void* first = dlsym(RTLD_DEFAULT, kComputeDependenciesSymbol);
    const std::string first_path = object_path_of(first);
    if (first != nullptr && first_path != this_library_path()) {
      detail::warn_to_stderr(
          "loaded, but the first "
          "Engine::compute_dependencies in lookup order is the one in " +
          first_path +
          ", so backward passes will not be logged. Link "
          "autograd_device_logging before torch (C++), or import "
          "autograd_device_logging before torch (Python).");
    }
  } catch (...) {
    detail::disable("its load-time checks failed.");
  }
}

} // namespace torch::autograd::device_logging
