// Runs one backward pass of each device class on the test accelerator and
// exits normally; ctest checks the statistics summary it prints at exit
// (AUTOGRAD_DEVICE_LOGGING_STATS=1 in its environment).

#include "leak_check.h"

#include <torch/torch.h>

int main() {
  const c10::Device d0(c10::DeviceType::PrivateUse1, 0);
  const c10::Device d1(c10::DeviceType::PrivateUse1, 1);
  auto x = torch::ones({2}, torch::requires_grad());
  (x * 2).sum().backward(); // cpu_only
  auto a = torch::ones({2}, torch::device(d0).requires_grad(true));
  (a * 2).sum().backward();        // single_accelerator
  (x.to(d0) * 2).sum().backward(); // accelerator_cpu
  auto b = torch::ones({2}, torch::device(d1).requires_grad(true));
  ((a * 2).sum() + b.sum().to(d0)).backward(); // multi_accelerator
  // Note [Leaks are checked while torch's engine threads still run].
  torch::autograd::device_logging::testing::check_leaks_now();
  return 0;
}
