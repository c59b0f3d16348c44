// A training step of a C++ program linked with autograd_device_logging: the
// backward pass goes through the patched Engine::compute_dependencies without
// the program doing anything for it. It then prints the library's status.

#include <torch/csrc/autograd/device_logging.h>
#include <torch/csrc/autograd/device_stats.h>

#include <torch/torch.h>

#include <iostream>

int main() {
  namespace dl = torch::autograd::device_logging;
  dl::enable_backward_device_stats();

  torch::manual_seed(0);
  torch::nn::Linear layer(8, 4);
  auto loss = layer(torch::randn({16, 8})).pow(2).mean();
  loss.backward();

  const dl::DeviceLoggingStatus status = dl::device_logging_status();
  const dl::BackwardDeviceStats stats = dl::backward_device_stats();
  std::cout << "autograd_device_logging active: "
            << (status.active && status.disabled_reason.empty() ? "yes" : "no")
            << "\nbuilt for torch " << status.built_for_torch
            << ", running torch " << status.running_torch
            << "\nbackward passes counted: " << stats.passes() << " (cpu_only "
            << stats.cpu_only << ")"
            << "\nweight grad norm: "
            << layer->weight.grad().norm().item<double>() << std::endl;
  return status.active ? 0 : 1;
}
