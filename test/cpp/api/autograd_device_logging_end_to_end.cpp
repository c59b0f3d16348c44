// End-to-end tests: real backward passes through libtorch's Engine::execute
// on the two-device test accelerator (testaccel:0, testaccel:1) and the CPU.
// One process per test (gtest_discover_tests): the events are once per
// process.

#include "autograd_test_graphs.h"

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/device_logging.h>
#include <torch/csrc/autograd/device_logging_c_api.h>
#include <torch/csrc/autograd/device_stats.h>

#include <torch/torch.h>

#include <c10/core/AutogradState.h>
#include <c10/util/Logging.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace torch::autograd::device_logging {
namespace {

using testing::ApiUsageRecorder;

constexpr const char* kMulti = kMultiDeviceBackwardEventName;
constexpr const char* kGpuCpu = kGpuCpuBackwardEventName;

const c10::Device kDevice0(c10::DeviceType::PrivateUse1, 0);
const c10::Device kDevice1(c10::DeviceType::PrivateUse1, 1);

torch::Tensor leaf(c10::Device device, int64_t n = 4) {
  return torch::arange(1.0, n + 1.0).to(device).detach().requires_grad_();
}

TEST(TestAccelerator, HasTwoDevicesThatHoldData) {
  auto a = torch::arange(6.0).view({2, 3}).to(kDevice1);
  EXPECT_EQ(a.device(), kDevice1);
  auto b = (a * 2).to(kDevice0);
  EXPECT_EQ(b.device(), kDevice0);
  EXPECT_TRUE(torch::equal(b.cpu(), torch::arange(6.0).view({2, 3}) * 2));
}

TEST(TestAccelerator, InputStreamDevicesAreTheMetadataDevices) {
  // Note [Reading an input's device through its stream], on a mixed graph.
  auto x = torch::ones({3}, torch::requires_grad());
  auto y = leaf(kDevice1, 3);
  auto z = ((x.to(kDevice0) * 2).to(kDevice1) * y).cpu().sum();
  size_t inputs_read = 0;
  EXPECT_EQ(
      testing::count_inputs_whose_stream_device_differs(z, &inputs_read), 0u);
  EXPECT_GE(inputs_read, 6u);
}

TEST(EndToEnd, DeviceAndCpuGiveGpuCpuOnly) {
  ApiUsageRecorder recorder;
  auto x = torch::ones({3}, torch::requires_grad());
  (x.to(kDevice0) * 2).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), torch::full({3}, 2.0)));
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kGpuCpu});
}

TEST(EndToEnd, OneDeviceAloneGivesNothing) {
  ApiUsageRecorder recorder;
  auto x = leaf(kDevice0);
  (x * x).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad().cpu(), 2 * torch::arange(1.0, 5.0)));
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_GT(device_logging_status().nodes_inspected, 0u);
}

TEST(EndToEnd, TwoDevicesGiveMultideviceOnly) {
  ApiUsageRecorder recorder;
  auto a = leaf(kDevice0);
  auto b = leaf(kDevice1);
  ((a * 2).sum() + (b * 3).sum().to(kDevice0)).backward();
  EXPECT_TRUE(torch::equal(a.grad().cpu(), torch::full({4}, 2.0)));
  EXPECT_TRUE(torch::equal(b.grad().cpu(), torch::full({4}, 3.0)));
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kMulti});
}

TEST(EndToEnd, TwoDevicesAndCpuGiveBothInOnePass) {
  ApiUsageRecorder recorder;
  auto a = torch::ones({4}, torch::requires_grad());
  auto b = torch::ones({4}, torch::requires_grad());
  ((a.to(kDevice0) * 2).sum() + (b.to(kDevice1) * 3).sum().to(kDevice0))
      .backward();
  EXPECT_EQ(recorder.count(kMulti), 1u);
  EXPECT_EQ(recorder.count(kGpuCpu), 1u);
  EXPECT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
}

TEST(EndToEnd, RepeatedPassesGiveEachEventOnce) {
  ApiUsageRecorder recorder;
  for (int i = 0; i < 10; ++i) {
    auto a = torch::ones({4}, torch::requires_grad());
    (a.to(kDevice0) * 2).sum().backward();
    auto b = leaf(kDevice0);
    auto c = leaf(kDevice1);
    ((b * c.to(kDevice0)).sum()).backward();
  }
  EXPECT_EQ(recorder.count(kMulti), 1u);
  EXPECT_EQ(recorder.count(kGpuCpu), 1u);
  EXPECT_EQ(recorder.events().size(), 2u);
}

TEST(EndToEnd, AfterBothFiredManyPassesInspectNothing) {
  auto a = torch::ones({4}, torch::requires_grad());
  ((a.to(kDevice0)).sum() + a.to(kDevice1).sum().to(kDevice0)).backward();
  ASSERT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
  const uint64_t inspected = device_logging_status().nodes_inspected;
  for (int i = 0; i < 200; ++i) {
    auto x = torch::ones({2}, torch::requires_grad());
    ((x.to(kDevice1) * 3).to(kDevice0).sum() + x.sum().to(kDevice0)).backward();
  }
  EXPECT_EQ(device_logging_status().nodes_inspected, inspected);
}

TEST(EndToEnd, SixteenThreadsThousandPassesEachEventOnceGradientsRight) {
  ApiUsageRecorder recorder;
  constexpr int kThreads = 16;
  constexpr int kPasses = 1000;
  std::atomic<int> wrong_gradients{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &wrong_gradients] {
      for (int i = 0; i < kPasses; ++i) {
        auto x = torch::full(
            {2}, static_cast<double>(t + 1), torch::requires_grad());
        switch ((t + i) % 3) {
          case 0: // CPU only
            (x * x).sum().backward();
            break;
          case 1: // accelerator and CPU
            (x.to(kDevice0) * x.to(kDevice0)).sum().backward();
            break;
          default: // two accelerators and CPU
            ((x.to(kDevice0) * x.to(kDevice0)).sum() +
             (x.to(kDevice1) * 0).sum().to(kDevice0))
                .backward();
        }
        if (!torch::equal(x.grad(), torch::full({2}, 2.0 * (t + 1)))) {
          ++wrong_gradients;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(wrong_gradients.load(), 0);
  EXPECT_EQ(recorder.count(kMulti), 1u);
  EXPECT_EQ(recorder.count(kGpuCpu), 1u);
  EXPECT_EQ(recorder.events().size(), 2u);
}

// --- The per-process record, asked for by many threads at once
// ------------------------------------------------------

// Sixteen threads reach the first pass and both events at once: each only
// asks the writer thread (Note [The record is written off the backward
// path]), which writes one file holding both events; run under TSan with the
// other concurrent cases.
TEST(ProcessRecord, SixteenThreadsAskTheWriterAtOnce) {
  char dir_template[] = "/tmp/adl-record-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path dir = std::filesystem::path(dir_template) / "r";
  autograd_device_logging_set_report_dir(dir.c_str());
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 20; ++i) {
        auto x = torch::full({2}, 1.0, torch::requires_grad());
        if ((t + i) % 2 == 0) {
          (x.to(kDevice0) * 2).sum().backward();
        } else {
          ((x.to(kDevice0) * 2).sum() + x.to(kDevice1).sum().to(kDevice0))
              .backward();
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  ASSERT_EQ(autograd_device_logging_write_process_record(), 1);
  std::vector<std::filesystem::path> records;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") {
      records.push_back(entry.path());
    }
  }
  ASSERT_EQ(records.size(), 1u);
  std::ifstream in(records[0]);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find(std::string("\"") + kMulti + "\""), std::string::npos);
  EXPECT_NE(text.find(std::string("\"") + kGpuCpu + "\""), std::string::npos);
  EXPECT_NE(text.find("\"written_at\":\"explicit\""), std::string::npos);
  // The temporaries went with their renames.
  EXPECT_TRUE(std::filesystem::is_empty(dir / ".tmp"));
  autograd_device_logging_set_report_dir("");
  std::filesystem::remove_all(dir_template);
}

// --- A failing classifier
// ------------------------------------------------------

size_t occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++count;
  }
  return count;
}

// A mixed pass (CPU, testaccel:0 and testaccel:1) whose gradient is checked.
void run_mixed_pass_and_check_gradient() {
  auto x = torch::arange(1.0, 5.0).requires_grad_();
  ((x.to(kDevice0) * x.to(kDevice0)).sum() +
   (x.to(kDevice1) * 3).sum().to(kDevice0))
      .backward();
  EXPECT_TRUE(torch::equal(x.grad(), 2 * torch::arange(1.0, 5.0) + 3));
}

// Injects `fault` through the test seam: the first classified pass must
// disable the library with one warning naming `reason`, every pass must
// compute the same gradients, and nothing may be classified or emitted
// afterwards, also once the fault is gone.
void expect_fault_disables_the_library_once(
    ClassifierFaultForTesting fault,
    const std::string& reason) {
  ApiUsageRecorder recorder;
  set_classifier_fault_for_testing(fault);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    run_mixed_pass_and_check_gradient();
  }
  const std::string stderr_text = ::testing::internal::GetCapturedStderr();
  set_classifier_fault_for_testing(nullptr);
  EXPECT_EQ(occurrences(stderr_text, "autograd_device_logging: disabled: "), 1u)
      << stderr_text;
  EXPECT_EQ(occurrences(stderr_text, reason), 1u) << stderr_text;
  const DeviceLoggingStatus status = device_logging_status();
  EXPECT_NE(status.disabled_reason.find(reason), std::string::npos)
      << status.disabled_reason;
  EXPECT_EQ(status.nodes_inspected, 0u);
  EXPECT_EQ(status.events_raised, 0);
  run_mixed_pass_and_check_gradient();
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_EQ(device_logging_status().nodes_inspected, 0u);
}

TEST(ClassifierFault, TorchErrorDisablesOnceAndBackwardIsUnchanged) {
  SKIP_WHERE_TORCH_LOGS_THE_EVENTS();
  expect_fault_disables_the_library_once(
      [] { TORCH_CHECK(false, "injected torch error"); },
      "injected torch error");
}

TEST(ClassifierFault, BadAllocDisablesOnceAndBackwardIsUnchanged) {
  SKIP_WHERE_TORCH_LOGS_THE_EVENTS();
  expect_fault_disables_the_library_once(
      [] { throw std::bad_alloc(); },
      "classifying a backward pass failed: std::bad_alloc");
}

TEST(ClassifierFault, NonStdExceptionDisablesOnceAndBackwardIsUnchanged) {
  SKIP_WHERE_TORCH_LOGS_THE_EVENTS();
  expect_fault_disables_the_library_once(
      [] { throw 42; }, "classifying a backward pass failed.");
}

TEST(ClassifierFault, SixteenThreadsFailingAtOnceWarnOnce) {
  SKIP_WHERE_TORCH_LOGS_THE_EVENTS();
  ApiUsageRecorder recorder;
  set_classifier_fault_for_testing(
      [] { TORCH_CHECK(false, "injected under load"); });
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 50; ++i) {
        run_mixed_pass_and_check_gradient(); // gtest assertions are thread-safe
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const std::string stderr_text = ::testing::internal::GetCapturedStderr();
  set_classifier_fault_for_testing(nullptr);
  EXPECT_EQ(occurrences(stderr_text, "autograd_device_logging: disabled: "), 1u)
      << stderr_text;
  EXPECT_TRUE(recorder.events().empty());
}

TEST(ClassifierFault, FaultWithStatisticsOnDisablesOnce) {
  SKIP_WHERE_TORCH_LOGS_THE_EVENTS();
  enable_backward_device_stats();
  expect_fault_disables_the_library_once(
      [] { TORCH_CHECK(false, "injected with stats on"); },
      "injected with stats on");
  // Disabled means disabled: the statistics stop counting too.
  const uint64_t counted = backward_device_stats().passes();
  run_mixed_pass_and_check_gradient();
  EXPECT_EQ(backward_device_stats().passes(), counted);
}

TEST(ClassifierFault, ThrowingApiUsageLoggerDisablesOnce) {
  SKIP_WHERE_TORCH_LOGS_THE_EVENTS();
  // A user's logger that throws when the library emits an event: the throw
  // happens inside emit(), must not reach the engine, and disables the
  // library with one warning.
  c10::SetAPIUsageLogger([](const std::string& event) {
    if (event == kGpuCpuBackwardEventName ||
        event == kMultiDeviceBackwardEventName) {
      throw std::runtime_error("user logger failed");
    }
  });
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    run_mixed_pass_and_check_gradient();
  }
  const std::string stderr_text = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(occurrences(stderr_text, "autograd_device_logging: disabled: "), 1u)
      << stderr_text;
  EXPECT_NE(
      device_logging_status().disabled_reason.find("user logger failed"),
      std::string::npos)
      << device_logging_status().disabled_reason;
}

// --- Per-pass statistics
// ------------------------------------------------------

// One pass of each device class; multi_accelerator twice (with and without
// the CPU).
void run_one_pass_of_each_class() {
  auto cpu_leaf = torch::ones({2}, torch::requires_grad());
  (cpu_leaf * 2).sum().backward(); // cpu_only
  auto on0 = leaf(kDevice0);
  (on0 * 2).sum().backward();                   // single_accelerator
  (cpu_leaf.to(kDevice0) * 2).sum().backward(); // accelerator_cpu
  auto on1 = leaf(kDevice1);
  ((on0 * 2).sum() + on1.sum().to(kDevice0)).backward(); // multi_accelerator
  ((cpu_leaf.to(kDevice0)).sum() + cpu_leaf.to(kDevice1).sum().to(kDevice0))
      .backward(); // multi_accelerator, with CPU nodes
}

TEST(DeviceStats, AreOffByDefault) {
  run_one_pass_of_each_class();
  const BackwardDeviceStats stats = backward_device_stats();
  EXPECT_FALSE(stats.enabled);
  EXPECT_EQ(stats.passes(), 0u);
  // The hook did classify these passes (on every release: Note [Where torch
  // logs the events itself]); it only counted none of them.
  EXPECT_GT(device_logging_status().nodes_inspected, 0u);
  EXPECT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
}

TEST(DeviceStats, CountEveryClassAndReset) {
  enable_backward_device_stats();
  run_one_pass_of_each_class();
  BackwardDeviceStats stats = backward_device_stats();
  EXPECT_TRUE(stats.enabled);
  EXPECT_EQ(stats.cpu_only, 1u);
  EXPECT_EQ(stats.single_accelerator, 1u);
  EXPECT_EQ(stats.accelerator_cpu, 1u);
  EXPECT_EQ(stats.multi_accelerator, 2u);
  EXPECT_EQ(stats.max_accelerators_in_one_pass, 2);
  // Both events have fired by now; the statistics keep counting.
  ASSERT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
  run_one_pass_of_each_class();
  EXPECT_EQ(backward_device_stats().passes(), 10u);

  reset_backward_device_stats();
  stats = backward_device_stats();
  EXPECT_TRUE(stats.enabled);
  EXPECT_EQ(stats.passes(), 0u);
  EXPECT_EQ(stats.max_accelerators_in_one_pass, 0);
  auto x = torch::ones({2}, torch::requires_grad());
  (x.to(kDevice1) * 3).sum().backward();
  EXPECT_EQ(backward_device_stats().accelerator_cpu, 1u);
  EXPECT_EQ(backward_device_stats().passes(), 1u);

  enable_backward_device_stats(false);
  run_one_pass_of_each_class();
  EXPECT_EQ(backward_device_stats().passes(), 1u);
}

TEST(DeviceStats, MaxIsTheWidestPassNotTheLast) {
  enable_backward_device_stats();
  auto on0 = leaf(kDevice0);
  auto on1 = leaf(kDevice1);
  ((on0 * 2).sum() + on1.sum().to(kDevice0)).backward(); // 2 accelerators
  (on0 * 2).sum().backward(); // 1 accelerator, after the widest
  EXPECT_EQ(backward_device_stats().max_accelerators_in_one_pass, 2);
  reset_backward_device_stats();
  EXPECT_EQ(backward_device_stats().max_accelerators_in_one_pass, 0);
  (on1 * 2).sum().backward();
  EXPECT_EQ(backward_device_stats().max_accelerators_in_one_pass, 1);
}

TEST(DeviceStats, CountExactlyUnderConcurrentPasses) {
  enable_backward_device_stats();
  constexpr int kThreads = 8;
  constexpr int kRounds = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kRounds; ++i) {
        run_one_pass_of_each_class();
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const BackwardDeviceStats stats = backward_device_stats();
  EXPECT_EQ(stats.cpu_only, kThreads * kRounds);
  EXPECT_EQ(stats.single_accelerator, kThreads * kRounds);
  EXPECT_EQ(stats.accelerator_cpu, kThreads * kRounds);
  EXPECT_EQ(stats.multi_accelerator, 2 * kThreads * kRounds);
  EXPECT_EQ(stats.max_accelerators_in_one_pass, 2);
}

// Through the C ABI the threading-cost measurement calls: the class of the
// pass (-1: no census), the devices it spanned, the nodes it read.
struct TakenCensus {
  int device_class = -1;
  std::string devices;
  uint64_t nodes = 0;
};

TakenCensus take_census() {
  TakenCensus taken;
  char devices[128] = {};
  taken.device_class = autograd_device_logging_take_pass_census(
      devices, sizeof(devices), &taken.nodes);
  taken.devices = devices;
  return taken;
}

// Note [A census on request]: after both events fired, a requested pass is
// still read in full, passes of other threads and later passes are not, and
// the request is gone once taken.
TEST(CensusOnRequest, ReadsTheRequestedPassAfterBothEventsFired) {
  auto a = torch::ones({4}, torch::requires_grad());
  ((a.to(kDevice0)).sum() + a.to(kDevice1).sum().to(kDevice0)).backward();
  ASSERT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
  const uint64_t inspected = device_logging_status().nodes_inspected;

  EXPECT_EQ(take_census().device_class, -1); // nothing requested
  ASSERT_EQ(autograd_device_logging_request_pass_census(), 1);
  // Another thread's pass does not take this thread's request.
  std::thread([] {
    auto x = leaf(kDevice0);
    (x * 2).sum().backward();
  }).join();
  EXPECT_EQ(device_logging_status().nodes_inspected, inspected);
  auto b = leaf(kDevice1);
  (b.to(kDevice0) * 2).sum().backward();
  const TakenCensus taken = take_census();
  EXPECT_EQ(
      taken.device_class,
      static_cast<int>(BackwardDeviceClass::kMultiAccelerator));
  EXPECT_EQ(taken.devices, "testaccel:0,testaccel:1");
  EXPECT_EQ(taken.nodes, device_logging_status().nodes_inspected - inspected);
  EXPECT_GT(taken.nodes, 0u);

  // Taken once; the next pass is not read.
  const uint64_t after = device_logging_status().nodes_inspected;
  EXPECT_EQ(take_census().device_class, -1);
  (leaf(kDevice0) * 2).sum().backward();
  EXPECT_EQ(device_logging_status().nodes_inspected, after);
}

TEST(CensusOnRequest, ClassifiesACpuOnlyPass) {
  ASSERT_EQ(autograd_device_logging_request_pass_census(), 1);
  (torch::ones({3}, torch::requires_grad()) * 2).sum().backward();
  const TakenCensus taken = take_census();
  EXPECT_EQ(
      taken.device_class, static_cast<int>(BackwardDeviceClass::kCpuOnly));
  EXPECT_EQ(taken.devices, "");
}

TEST(CensusOnRequest, WithdrawnRequestLeavesThePassAlone) {
  auto a = torch::ones({4}, torch::requires_grad());
  ((a.to(kDevice0)).sum() + a.to(kDevice1).sum().to(kDevice0)).backward();
  ASSERT_EQ(autograd_device_logging_request_pass_census(), 1);
  EXPECT_EQ(take_census().device_class, -1); // withdraws it
  const uint64_t inspected = device_logging_status().nodes_inspected;
  (leaf(kDevice0) * 2).sum().backward();
  EXPECT_EQ(device_logging_status().nodes_inspected, inspected);
}

// The mode the engine reads: the flag torch's own setter sets, per thread.
TEST(MultithreadingMode, SetAndRestoredThroughAutogradState) {
  EXPECT_EQ(autograd_device_logging_multithreading_enabled(), 1);
  EXPECT_EQ(autograd_device_logging_set_multithreading_enabled(0), 1);
  EXPECT_FALSE(
      c10::AutogradState::get_tls_state().get_multithreading_enabled());
  int other = 0;
  std::thread([&] {
    other = autograd_device_logging_multithreading_enabled();
  }).join();
  EXPECT_EQ(other, 1);
  EXPECT_EQ(autograd_device_logging_set_multithreading_enabled(1), 0);
  EXPECT_EQ(autograd_device_logging_multithreading_enabled(), 1);
}

// Where a C++ caller's passes run, with and without the calling-thread opt-in
// (Note [The calling thread from the root]): which thread ran the root node
// (a hook on the output the pass starts from runs in its grad_fn's pre-hook)
// and the last (a hook on the leaf), how often the caller slept during
// backward, and the multithreading mode read inside the hooks.
struct PassPlacement {
  int passes = 0;
  int roots_on_caller = 0;
  int leaf_hooks = 0;
  int leaves_on_caller = 0;
  long sleeps = 0;
  bool mode_in_hooks_always_on = true;
};

// The calling thread's voluntary context switches so far.
long voluntary_context_switches() {
  std::ifstream status("/proc/thread-self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
      return std::stol(line.substr(line.find(':') + 1));
    }
  }
  return -1;
}

// `passes` passes of `start(root, leaf)`, each on a fresh graph: `leaf` on
// `leaf_device`, the root (the output the pass starts from) on `root_device`.
template <typename Start>
PassPlacement place(
    int passes,
    c10::Device leaf_device,
    c10::Device root_device,
    Start start) {
  PassPlacement placement;
  const std::thread::id caller = std::this_thread::get_id();
  auto watch = [&](torch::Tensor t, int* on_caller) {
    t.register_hook([&placement, caller, on_caller](const torch::Tensor&) {
      *on_caller += std::this_thread::get_id() == caller;
      placement.mode_in_hooks_always_on &=
          c10::AutogradState::get_tls_state().get_multithreading_enabled();
    });
  };
  for (int i = 0; i < passes; ++i) {
    auto a = leaf(leaf_device);
    a.register_hook(
        [&placement](const torch::Tensor&) { ++placement.leaf_hooks; });
    watch(a, &placement.leaves_on_caller);
    auto root = (torch::tanh(a * 2).to(root_device) * 3).pow(2).sum();
    watch(root, &placement.roots_on_caller);
    const long before = voluntary_context_switches();
    start(root, a);
    placement.sleeps += voluntary_context_switches() - before;
    ++placement.passes;
  }
  return placement;
}

void loss_backward(torch::Tensor& root, torch::Tensor&) {
  root.backward();
}

void grad_with_create_graph(torch::Tensor& root, torch::Tensor& a) {
  auto grads = torch::autograd::grad({root}, {a}, {}, true, true);
  grads[0].sum().backward();
}

void backward_of_two_roots(torch::Tensor& root, torch::Tensor& a) {
  torch::autograd::backward({root, (a * a).sum()});
}

TEST(CallingThread, EveryNodeOfASingleDevicePassRunsOnTheCaller) {
  constexpr int kPasses = 20;
  (leaf(kDevice0) * 2).sum().backward(); // device threads started
  // Five times the passes, so that "no sleep" cannot happen by chance (one
  // pass in five slept under AddressSanitizer on a loaded machine).
  const PassPlacement stock =
      place(5 * kPasses, kDevice0, kDevice0, loss_backward);
  // Stock torch: the root on the device thread, the caller asleep meanwhile,
  // unless the device thread finished the pass before the caller waited
  // (often, on a loaded machine).
  EXPECT_EQ(stock.roots_on_caller, 0);
  EXPECT_EQ(stock.leaves_on_caller, 0);
  EXPECT_GT(stock.sleeps, 0);

  ASSERT_EQ(autograd_device_logging_set_calling_thread(1), 1);
  for (auto start : {loss_backward, grad_with_create_graph}) {
    const PassPlacement p = place(kPasses, kDevice0, kDevice0, start);
    EXPECT_EQ(p.roots_on_caller, kPasses);
    EXPECT_GE(p.leaf_hooks, kPasses);
    EXPECT_EQ(p.leaves_on_caller, p.leaf_hooks);
    // A sleep is a whole context switch: at most one in ten passes, for
    // whatever else the process blocks on (a sanitizer's allocator).
    EXPECT_LE(p.sleeps, kPasses / 10);
    EXPECT_TRUE(p.mode_in_hooks_always_on);
  }
  // Two roots: the engine's GraphRoot is the root node; the watched output's
  // grad_fn is the first node after it.
  const PassPlacement two =
      place(kPasses, kDevice0, kDevice0, backward_of_two_roots);
  EXPECT_EQ(two.roots_on_caller, kPasses);
  EXPECT_EQ(two.leaves_on_caller, kPasses);
  EXPECT_LE(two.sleeps, kPasses / 10);
  EXPECT_TRUE(c10::AutogradState::get_tls_state().get_multithreading_enabled());
}

TEST(CallingThread, PassesAcrossDevicesKeepTheDeviceThreads) {
  ASSERT_EQ(autograd_device_logging_set_calling_thread(1), 1);
  (leaf(kDevice0) * 2).sum().backward(); // device threads started
  const PassPlacement two = place(10, kDevice0, kDevice1, loss_backward);
  EXPECT_EQ(two.roots_on_caller, 0);
  EXPECT_EQ(two.leaves_on_caller, 0);
  const PassPlacement with_cpu =
      place(10, torch::kCPU, kDevice0, loss_backward);
  EXPECT_EQ(with_cpu.roots_on_caller, 0);
  EXPECT_TRUE(two.mode_in_hooks_always_on && with_cpu.mode_in_hooks_always_on);
}

TEST(DeviceStats, SummaryText) {
  BackwardDeviceStats stats;
  stats.enabled = true;
  stats.cpu_only = 3;
  stats.single_accelerator = 1;
  stats.accelerator_cpu = 4;
  stats.multi_accelerator = 2;
  stats.max_accelerators_in_one_pass = 2;
  EXPECT_EQ(
      format_backward_device_stats(stats),
      "autograd device stats: 10 backward passes: cpu_only=3 "
      "single_accelerator=1 accelerator_cpu=4 multi_accelerator=2 "
      "max_accelerators_in_one_pass=2");
}

} // namespace
} // namespace torch::autograd::device_logging
