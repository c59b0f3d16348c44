// The library linked into a process whose torch is not the one it was built
// for (this test build claims torch 0.0.0): it must say so once, classify
// nothing, and leave every backward pass exactly as libtorch computes it.

#include "autograd_test_graphs.h"

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/device_logging.h>

#include <torch/torch.h>

#include <gtest/gtest.h>

namespace torch::autograd::device_logging {
namespace {

using namespace testing;

TEST(VersionMismatch, IsReportedWithBothVersions) {
  const DeviceLoggingStatus status = device_logging_status();
  EXPECT_EQ(status.built_for_torch, "0.0.0");
  EXPECT_FALSE(status.running_torch.empty());
  EXPECT_NE(
      status.disabled_reason.find("built for torch 0.0.0"), std::string::npos)
      << status.disabled_reason;
  EXPECT_NE(
      status.disabled_reason.find("runs torch " + status.running_torch),
      std::string::npos)
      << status.disabled_reason;
}

TEST(VersionMismatch, ForwardsButClassifiesNothing) {
  SKIP_WHERE_TORCH_LOGS_THE_EVENTS();
  register_two_test_devices();
  ApiUsageRecorder recorder;
  auto root = make_node({cpu()});
  auto a = make_node({cuda(0)});
  auto b = make_node({cuda(1)});
  connect(root, a);
  connect(root, b);
  auto task = make_graph_task(root.get());
  run_bound_compute_dependencies(root.get(), *task);
  // libtorch's walk ran...
  EXPECT_EQ(task->dependencies_.at(a.get()), 1);
  EXPECT_EQ(task->nodes_in_graph_.size(), 2u);
  // ...and nothing read the graph.
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_EQ(device_logging_status().nodes_inspected, 0u);
  EXPECT_TRUE(device_logging_status().active);
}

TEST(VersionMismatch, RealBackwardIsUnchanged) {
  auto x = torch::arange(1.0, 5.0).requires_grad_();
  (x * x).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), 2 * torch::arange(1.0, 5.0)));
}

} // namespace
} // namespace torch::autograd::device_logging
