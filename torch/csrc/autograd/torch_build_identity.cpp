// Which build of torch this is (Note [A build runs only on the torch build it
// was made for]).

#include <torch/csrc/autograd/torch_build_identity.h>

// Note [Where the running torch's version is read]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// libtorch records its version among its build options, which
// caffe2::GetBuildOptions() returns as a map. Releases whose wheels do not
// ship <caffe2/core/common.h> (2.4 among them) still print the same options
// in at::show_config(), a public API of every 2.x release, as
// "NAME=value, "; the header decides which one is read.
#if __has_include(<caffe2/core/common.h>)
#include <caffe2/core/common.h>
#define AUTOGRAD_DEVICE_LOGGING_HAS_BUILD_OPTIONS
#else
#include <ATen/Version.h>
#endif

#include <dlfcn.h>

#include <fstream>
#include <string>

namespace torch::autograd::device_logging::detail {

namespace {

// The first line of `path` that starts with `prefix`, less the prefix; the
// quotes around a Python string literal are taken off. Empty if none.
std::string line_value(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) {
      continue;
    }
    std::string value = line.substr(prefix.size());
    while (!value.empty() &&
           (value.back() == '\r' || value.back() == ' ' ||
            value.back() == '\'' || value.back() == '"')) {
      value.pop_back();
    }
    const size_t start = value.find_first_not_of("'\" ");
    return start == std::string::npos ? std::string() : value.substr(start);
  }
  return {};
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// Which mangling of at::show_config() (it returns a std::string) the running
// libtorch_cpu defines: 1 for the C++11 string ABI, 0 for the old one.
int libtorch_cxx11_abi(const std::string& libtorch_cpu_path) {
  void* handle = dlopen(libtorch_cpu_path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) {
    return -1;
  }
  int abi = -1;
  if (dlsym(handle, "_ZN2at11show_configB5cxx11Ev") != nullptr) {
    abi = 1;
  } else if (dlsym(handle, "_ZN2at11show_configEv") != nullptr) {
    abi = 0;
  }
  dlclose(handle);
  return abi;
}

} // namespace

std::string libtorch_build_option(const std::string& name) noexcept {
  try {
#ifdef AUTOGRAD_DEVICE_LOGGING_HAS_BUILD_OPTIONS
    const auto& options = caffe2::GetBuildOptions();
    const auto it = options.find(name);
    return it == options.end() ? std::string() : it->second;
#else
    const std::string config = at::show_config();
    const std::string key = name + "=";
    size_t at = 0;
    // A whole option name: at the start of the list or after ", ".
    while ((at = config.find(key, at)) != std::string::npos && at != 0 &&
           config[at - 1] != ' ') {
      at += key.size();
    }
    if (at == std::string::npos) {
      return {};
    }
    const size_t start = at + key.size();
    const size_t end = config.find_first_of(",\n", start);
    return config.substr(
        start, end == std::string::npos ? std::string::npos : end - start);
#endif
  } catch (...) {
    return {};
  }
}

TorchBuildIdentity running_torch_identity(
    const std::string& libtorch_cpu_path) noexcept {
  TorchBuildIdentity identity;
  try {
    const std::string torch_version = libtorch_build_option("TORCH_VERSION");
    identity.release =
        torch_version.substr(0, torch_version.find_first_not_of("0123456789."));
    identity.version = identity.release;
    identity.commit = libtorch_build_option("COMMIT_SHA");
    if (libtorch_cpu_path.empty()) {
      return identity;
    }
    identity.cxx11_abi = libtorch_cxx11_abi(libtorch_cpu_path);
    // lib/libtorch_cpu.so in a torch package (version.py) or in an unpacked
    // libtorch (build-version, build-hash).
    const std::string root = directory_of(directory_of(libtorch_cpu_path));
    std::string version = line_value(root + "/version.py", "__version__ = ");
    std::string commit = line_value(root + "/version.py", "git_version = ");
    if (version.empty()) {
      version = line_value(root + "/build-version", "");
      commit = line_value(root + "/build-hash", "");
    }
    if (!version.empty()) {
      identity.version = version;
    }
    if (identity.commit.empty() && commit != "Unknown") {
      identity.commit = commit;
    }
  } catch (...) {
  }
  return identity;
}

std::string build_mismatch(
    const TorchBuildIdentity& built,
    const TorchBuildIdentity& running) {
  if (built.release != running.release) {
    return "it was built for torch " + built.release +
        " but this process runs torch " +
        (running.release.empty() ? std::string("of unknown version")
                                 : running.release) +
        ".";
  }
  const bool other_abi = built.cxx11_abi >= 0 && running.cxx11_abi >= 0 &&
      built.cxx11_abi != running.cxx11_abi;
  const bool other_source = !built.commit.empty() && !running.commit.empty()
      ? built.commit != running.commit
      : built.version != running.version;
  if (!other_abi && !other_source) {
    return {};
  }
  return "it was built for torch " + describe(built) +
      " but this process runs torch " + describe(running) +
      ", another build of the same release.";
}

std::string describe(const TorchBuildIdentity& identity) {
  std::string out =
      identity.version.empty() ? identity.release : identity.version;
  std::string details;
  if (!identity.commit.empty()) {
    details = "commit " + identity.commit.substr(0, 12);
  }
  if (identity.cxx11_abi >= 0) {
    details += std::string(details.empty() ? "" : ", ") +
        (identity.cxx11_abi == 1 ? "C++11 string ABI" : "pre-C++11 string ABI");
  }
  return details.empty() ? out : out + " (" + details + ")";
}

} // namespace torch::autograd::device_logging::detail
