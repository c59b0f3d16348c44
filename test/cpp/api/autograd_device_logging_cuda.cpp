// Real CUDA backward passes through libtorch's Engine::execute with the
// library linked. Each case needs one or two CUDA devices and is skipped,
// saying so, where the machine has fewer. One process per test.

#include "autograd_test_graphs.h"

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/device_logging.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace torch::autograd::device_logging {
namespace {

using testing::ApiUsageRecorder;

constexpr const char* kMulti = kMultiDeviceBackwardEventName;
constexpr const char* kGpuCpu = kGpuCpuBackwardEventName;

#define REQUIRE_CUDA_DEVICES(n)                                  \
  if (static_cast<int>(torch::cuda::device_count()) < (n)) {     \
    GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " \
                 << torch::cuda::device_count();                 \
  }

c10::Device cuda(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::CUDA, index);
}

TEST(Cuda, InputStreamDevicesAreTheMetadataDevices) {
  // Note [Reading an input's device through its stream], on CUDA inputs.
  REQUIRE_CUDA_DEVICES(1);
  const c10::DeviceIndex last =
      static_cast<c10::DeviceIndex>(torch::cuda::device_count() - 1);
  auto x = torch::arange(1.0, 5.0).requires_grad_();
  auto y = torch::arange(1.0, 5.0, torch::device(cuda(last))).requires_grad_();
  auto z = ((x.to(cuda(0)) * 2).to(cuda(last)) * y).cpu().sum();
  size_t inputs_read = 0;
  EXPECT_EQ(
      testing::count_inputs_whose_stream_device_differs(z, &inputs_read), 0u);
  EXPECT_GE(inputs_read, 6u);
}

TEST(Cuda, DeviceAndCpuGiveGpuCpuOnly) {
  REQUIRE_CUDA_DEVICES(1);
  ApiUsageRecorder recorder;
  auto x = torch::arange(1.0, 5.0).requires_grad_();
  (x.to(cuda(0)) * x.to(cuda(0))).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), 2 * torch::arange(1.0, 5.0)));
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kGpuCpu});
}

TEST(Cuda, OneDeviceAloneGivesNothing) {
  REQUIRE_CUDA_DEVICES(1);
  ApiUsageRecorder recorder;
  auto x = torch::arange(1.0, 5.0, torch::device(cuda(0))).requires_grad_();
  (x * x).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad().cpu(), 2 * torch::arange(1.0, 5.0)));
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_GT(device_logging_status().nodes_inspected, 0u);
}

TEST(Cuda, TwoDevicesGiveMultideviceOnly) {
  REQUIRE_CUDA_DEVICES(2);
  ApiUsageRecorder recorder;
  auto a = torch::ones({4}, torch::device(cuda(0)).requires_grad(true));
  auto b = torch::ones({4}, torch::device(cuda(1)).requires_grad(true));
  ((a * 2).sum() + (b * 3).sum().to(cuda(0))).backward();
  EXPECT_TRUE(torch::equal(a.grad().cpu(), torch::full({4}, 2.0)));
  EXPECT_TRUE(torch::equal(b.grad().cpu(), torch::full({4}, 3.0)));
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kMulti});
}

TEST(Cuda, TwoDevicesAndCpuGiveBothInOnePass) {
  REQUIRE_CUDA_DEVICES(2);
  ApiUsageRecorder recorder;
  auto a = torch::ones({4}, torch::requires_grad());
  ((a.to(cuda(0)) * 2).sum() + (a.to(cuda(1)) * 3).sum().to(cuda(0)))
      .backward();
  EXPECT_TRUE(torch::equal(a.grad(), torch::full({4}, 5.0)));
  EXPECT_EQ(recorder.count(kMulti), 1u);
  EXPECT_EQ(recorder.count(kGpuCpu), 1u);
  EXPECT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
}

} // namespace
} // namespace torch::autograd::device_logging
