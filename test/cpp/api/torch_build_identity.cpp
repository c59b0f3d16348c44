// The build-identity rules (Note [A build runs only on the torch build it was
// made for]) as a pure function, and the running torch's identity as read
// from the libtorch this test runs with.

#include <torch/csrc/autograd/torch_build_identity.h>

#include <gtest/gtest.h>

#include <ATen/Version.h>

#include <dlfcn.h>

#include <string>

namespace torch::autograd::device_logging::detail {
namespace {

TorchBuildIdentity identity(
    std::string release,
    std::string version,
    std::string commit,
    int cxx11_abi) {
  TorchBuildIdentity out;
  out.release = std::move(release);
  out.version = std::move(version);
  out.commit = std::move(commit);
  out.cxx11_abi = cxx11_abi;
  return out;
}

TEST(TorchBuildIdentity, SameBuildMatches) {
  const auto build = identity("2.13.0", "2.13.0+cu130", "cf30153c", 1);
  EXPECT_EQ(build_mismatch(build, build), "");
}

TEST(TorchBuildIdentity, AnotherReleaseIsNamed) {
  EXPECT_EQ(
      build_mismatch(
          identity("2.12.0", "2.12.0", "", 1),
          identity("2.13.0", "2.13.0+cpu", "", 1)),
      "it was built for torch 2.12.0 but this process runs torch 2.13.0.");
  EXPECT_EQ(
      build_mismatch(
          identity("2.12.0", "2.12.0", "", 1), identity("", "", "", -1)),
      "it was built for torch 2.12.0 but this process runs torch of unknown "
      "version.");
}

TEST(TorchBuildIdentity, CommitDecidesWhereBothKnowIt) {
  // The local tag differs, the source does not.
  EXPECT_EQ(
      build_mismatch(
          identity("2.13.0", "2.13.0+cpu", "cf30153c", 1),
          identity("2.13.0", "2.13.0+cu130", "cf30153c", 1)),
      "");
  EXPECT_EQ(
      build_mismatch(
          identity("2.13.0", "2.13.0a0+deadbeef", "deadbeef", 1),
          identity("2.13.0", "2.13.0+cu130", "cf30153c4c131c81", 1)),
      "it was built for torch 2.13.0a0+deadbeef (commit deadbeef, C++11 "
      "string ABI) but this process runs torch 2.13.0+cu130 (commit "
      "cf30153c4c13, C++11 string ABI), another build of the same release.");
}

TEST(TorchBuildIdentity, FullVersionDecidesWithoutACommit) {
  EXPECT_EQ(
      build_mismatch(
          identity("2.13.0", "2.13.0.dev20260301", "", 1),
          identity("2.13.0", "2.13.0.dev20260301", "abc", 1)),
      "");
  EXPECT_NE(
      build_mismatch(
          identity("2.13.0", "2.13.0.dev20260301", "", 1),
          identity("2.13.0", "2.13.0.dev20260302", "abc", 1)),
      "");
  EXPECT_NE(
      build_mismatch(
          identity("2.13.0", "2.13.0a0+gitdeadbee", "", -1),
          identity("2.13.0", "2.13.0", "", -1)),
      "");
}

TEST(TorchBuildIdentity, AbiDecidesWhereBothKnowIt) {
  EXPECT_EQ(
      build_mismatch(
          identity("2.4.1", "2.4.1", "ee1b680", 0),
          identity("2.4.1", "2.4.1", "ee1b680", 1)),
      "it was built for torch 2.4.1 (commit ee1b680, pre-C++11 string ABI) "
      "but this process runs torch 2.4.1 (commit ee1b680, C++11 string ABI), "
      "another build of the same release.");
  EXPECT_EQ(
      build_mismatch(
          identity("2.4.1", "2.4.1", "ee1b680", 0),
          identity("2.4.1", "2.4.1", "ee1b680", -1)),
      "");
}

// What the build recorded (CMake, from the torch it builds against) is what
// the running libtorch and its installation say.
TEST(TorchBuildIdentity, RunningTorchIsTheOneBuiltAgainst) {
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<const void*>(&at::show_config), &info), 0);
  const TorchBuildIdentity running = running_torch_identity(info.dli_fname);
  EXPECT_EQ(running.version, ADL_TEST_TORCH_BUILD_VERSION);
  EXPECT_EQ(running.commit, ADL_TEST_TORCH_BUILD_COMMIT);
  EXPECT_EQ(running.cxx11_abi, ADL_TEST_TORCH_BUILD_CXX11_ABI);
  EXPECT_EQ(
      running.release,
      std::string(ADL_TEST_TORCH_BUILD_VERSION)
          .substr(0, running.release.size()));
  EXPECT_FALSE(running.release.empty());
}

} // namespace
} // namespace torch::autograd::device_logging::detail
