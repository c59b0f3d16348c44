// The library linked after torch, as a user might by mistake: libtorch binds
// its own Engine::compute_dependencies, so backward passes are not logged
// (the library says so at load; a ctest case checks that line). The library's
// RTLD_NEXT lookup of libtorch's definition misses here, since libtorch_cpu
// comes before it in the lookup order, and the fallback through libtorch_cpu's
// own handle must find it (Note [Finding libtorch's compute_dependencies]).

#include "autograd_test_graphs.h"

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/device_logging.h>

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <dlfcn.h>

namespace torch::autograd::device_logging {
namespace {

using namespace testing;

// clang-format off
constexpr const char* kSymbol =
    "_ZN5torch8autograd6Engine20compute_dependenciesEPNS0_4NodeERNS0_9GraphTaskEm";
// clang-format on

// The library's own definition, looked up through its handle.
ComputeDependenciesFn library_definition() {
  Dl_info info{};
  EXPECT_NE(
      dladdr(reinterpret_cast<const void*>(&device_logging_status), &info), 0);
  void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  EXPECT_NE(handle, nullptr) << info.dli_fname;
  return reinterpret_cast<ComputeDependenciesFn>(dlsym(handle, kSymbol));
}

TEST(TorchFirst, LibtorchsOwnDefinitionIsBound) {
  EXPECT_NE(
      bound_compute_dependencies_path().find("libtorch_cpu"), std::string::npos)
      << bound_compute_dependencies_path();
  auto x = torch::arange(1.0, 4.0).requires_grad_();
  (x * x).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), 2 * torch::arange(1.0, 4.0)));
  EXPECT_FALSE(device_logging_status().active);
}

TEST(TorchFirst, FallbackFindsLibtorchsDefinition) {
  // Not disabled: the fallback found the definition to forward to...
  EXPECT_EQ(device_logging_status().disabled_reason, "");
  // ...and the library's definition, called directly, runs libtorch's walk
  // through it and then classifies the pass.
  register_two_test_devices();
  ApiUsageRecorder recorder;
  auto root = make_node({cuda(0)});
  auto child = make_node({cpu()});
  connect(root, child);
  auto task = make_graph_task(root.get());
  const ComputeDependenciesFn ours = library_definition();
  ASSERT_NE(ours, nullptr);
  ours(&Engine::get_default_engine(), root.get(), *task, 0);
  EXPECT_EQ(task->dependencies_.at(child.get()), 1);
  EXPECT_TRUE(device_logging_status().active);
  EXPECT_EQ(
      recorder.events(), std::vector<std::string>{kGpuCpuBackwardEventName});
}

} // namespace
} // namespace torch::autograd::device_logging
