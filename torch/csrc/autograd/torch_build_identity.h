#pragma once

// Which build of torch this is: what the library was built against, what
// the process runs, and whether the library may read the running libtorch's
// data structures (Note [A build runs only on the torch build it was made
// for]).

#include <string>

namespace torch::autograd::device_logging::detail {

// Note [A build runs only on the torch build it was made for]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The classifier reads GraphTask::nodes_in_graph_ and Node's input metadata
// through the layouts of the headers it was compiled with, and one x.y.z
// covers many builds whose layouts may differ: nightlies
// (2.13.0.dev20260301), source builds (2.13.0a0+git...), the 2.x.0a0+<sha>
// builds of vendors' containers. So a build records the torch build's
// identity, and the library disables itself at load, with one line naming
// both, unless the running torch is the same build:
// - the release, major.minor.patch, must be equal (the check every build has
//   had);
// - the C++ string ABI must be equal (_GLIBCXX_USE_CXX11_ABI);
// - where both sides know the git commit, the commits must be equal; a
//   commit names the source exactly, whatever local tag the wheel carries
//   (+cpu, +cu130);
// - otherwise the full version strings, pre-release and local parts
//   included, must be equal.
// The running side is read from the running libtorch and its installation:
// the build options libtorch was compiled with (TORCH_VERSION, and
// COMMIT_SHA, which recent releases record and 2.0.1 does not), the version.py
// of the torch package around it (a wheel) or the build-version and build-hash
// files of an unpacked libtorch, and which mangling of at::show_config() it
// defines (the ABI). What cannot be read stays empty and is not compared.
struct TorchBuildIdentity {
  // major.minor.patch.
  std::string release;
  // The full version, e.g. "2.13.0+cu130" or "2.13.0a0+gitdeadbee"; the
  // release alone where nothing more is known.
  std::string version;
  // The git commit of the source, or empty.
  std::string commit;
  // _GLIBCXX_USE_CXX11_ABI: 0 or 1, or -1 where unknown.
  int cxx11_abi = -1;
};

// Why a library built against `built` must not read the data structures of
// `running`: a sentence for the disabled reason, or empty when it may.
std::string build_mismatch(
    const TorchBuildIdentity& built,
    const TorchBuildIdentity& running);

// The identity of the running torch whose libtorch_cpu is the file at
// `libtorch_cpu_path` (empty: only the build options are read). Never throws.
TorchBuildIdentity running_torch_identity(
    const std::string& libtorch_cpu_path) noexcept;

// "2.13.0+cu130 (commit cf30153c4c13, C++11 string ABI)": how a line names
// a build.
std::string describe(const TorchBuildIdentity& identity);

// The value libtorch records for `name` among its build options
// (TORCH_VERSION, COMMIT_SHA, ...), or empty. Never throws.
std::string libtorch_build_option(const std::string& name) noexcept;

} // namespace torch::autograd::device_logging::detail
