// Tests of the autograd device-logging patch: the classifier as a pure
// function, the patched Engine::compute_dependencies on hand-made graphs, and
// real backward passes through libtorch's Engine::execute.
//
// Events are once per process, so ctest runs every test in its own process
// (gtest_discover_tests); none of them resets the library's state.

#include "autograd_test_graphs.h"

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/device_logging.h>
#include <torch/csrc/autograd/device_stats.h>

#include <ATen/Version.h>
#include <torch/torch.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace torch::autograd::device_logging {
namespace {

using namespace testing;

constexpr const char* kMulti = kMultiDeviceBackwardEventName;
constexpr const char* kGpuCpu = kGpuCpuBackwardEventName;

std::vector<const Node*> raw(const std::vector<NodePtr>& nodes) {
  std::vector<const Node*> out;
  for (const auto& node : nodes) {
    out.push_back(node.get());
  }
  return out;
}

// --- routed_device -----------------------------------------------------------

TEST(RoutedDevice, NodeWithoutInputMetadataIsIgnored) {
  EXPECT_FALSE(routed_device(*make_node({})).has_value());
}

TEST(RoutedDevice, FirstNonCpuInputWins) {
  EXPECT_EQ(routed_device(*make_node({cpu()})), cpu());
  EXPECT_EQ(routed_device(*make_node({cuda(0)})), cuda(0));
  EXPECT_EQ(routed_device(*make_node({cpu(), cuda(1)})), cuda(1));
  EXPECT_EQ(routed_device(*make_node({cuda(1), cuda(0)})), cuda(1));
  EXPECT_EQ(routed_device(*make_node({cpu(), xpu(0), cuda(0)})), xpu(0));
}

TEST(RoutedDevice, MetaAndLazyStayOnTheCpuQueue) {
  EXPECT_EQ(routed_device(*make_node({meta()})), cpu());
  EXPECT_EQ(routed_device(*make_node({lazy()})), cpu());
  // meta is the first non-CPU input, so it routes the node, as in the engine.
  EXPECT_EQ(routed_device(*make_node({meta(), cuda(0)})), cpu());
  EXPECT_EQ(routed_device(*make_node({cpu(), cuda(0), meta()})), cuda(0));
}

TEST(RoutedDevice, UnusedInputPlaceholdersNeverRoute) {
  auto node = make_node({});
  node->add_input_metadata(Node::undefined_input());
  node->add_input_metadata(Node::undefined_input());
  EXPECT_EQ(routed_device(*node), cpu());
  auto mixed = make_node({});
  mixed->add_input_metadata(Node::undefined_input());
  add_device_input(*mixed, cuda(1));
  EXPECT_EQ(routed_device(*mixed), cuda(1));
}

TEST(InputDevice, IsTheMetadataDeviceForEveryKindOfInput) {
  // Hand-made metadata through InputMetadata's own constructor, with the
  // guards libtorch registers (CPU, Meta, Lazy) and the fake ones.
  for (const c10::Device device : {cpu(), meta(), lazy(), cuda(1), xpu(0)}) {
    auto node = make_node({device});
    EXPECT_EQ(input_device(*node, 0), node->input_metadata(0).device());
    EXPECT_EQ(input_device(*node, 0), device);
  }
  auto placeholder = make_node({});
  placeholder->add_input_metadata(Node::undefined_input());
  EXPECT_EQ(input_device(*placeholder, 0), cpu());
  // Real graphs on the CPU and on the meta device.
  for (const c10::Device device : {cpu(), meta()}) {
    auto x = torch::ones({4, 3}, torch::device(device).requires_grad(true));
    auto w = torch::ones({3, 2}, torch::device(device).requires_grad(true));
    auto y = (torch::mm(x, w) * 3).sum() * 2;
    size_t inputs_read = 0;
    EXPECT_EQ(count_inputs_whose_stream_device_differs(y, &inputs_read), 0u)
        << device;
    EXPECT_GE(inputs_read, 4u) << device;
  }
}

// --- backward_device_events
// ---------------------------------------------------

TEST(BackwardDeviceEvents, IsTheDefinitionOfBothEvents) {
  EXPECT_EQ(backward_device_events(0, false), kNoBackwardDeviceEvent);
  EXPECT_EQ(backward_device_events(0, true), kNoBackwardDeviceEvent);
  EXPECT_EQ(backward_device_events(1, false), kNoBackwardDeviceEvent);
  EXPECT_EQ(backward_device_events(1, true), kGpuCpuBackward);
  EXPECT_EQ(backward_device_events(2, false), kMultiDeviceBackward);
  EXPECT_EQ(backward_device_events(2, true), kAllBackwardDeviceEvents);
  EXPECT_EQ(
      backward_device_events(PassDeviceCensus::kMaxCountedAccelerators, true),
      kAllBackwardDeviceEvents);
}

// --- classify_backward_pass --------------------------------------------------

uint8_t events_of(
    std::initializer_list<std::initializer_list<c10::Device>> nodes,
    uint8_t wanted = kAllBackwardDeviceEvents) {
  std::vector<NodePtr> owned;
  for (const auto& devices : nodes) {
    owned.push_back(make_node(devices));
  }
  return classify_backward_pass(nullptr, raw(owned), wanted).events();
}

TEST(ClassifyBackwardPass, CpuOnlyDecidesNothing) {
  EXPECT_EQ(events_of({{cpu()}, {cpu(), cpu()}, {}}), kNoBackwardDeviceEvent);
}

TEST(ClassifyBackwardPass, OneAcceleratorWithoutCpuNodesDecidesNothing) {
  EXPECT_EQ(
      events_of({{cuda(0)}, {cuda(0), cpu()}, {}}), kNoBackwardDeviceEvent);
}

TEST(ClassifyBackwardPass, MetaAndLazyCountAsCpu) {
  EXPECT_EQ(events_of({{meta()}, {cpu()}, {lazy()}}), kNoBackwardDeviceEvent);
  EXPECT_EQ(events_of({{cuda(0)}, {meta()}}), kGpuCpuBackward);
}

TEST(ClassifyBackwardPass, AcceleratorAndCpuIsGpuCpu) {
  EXPECT_EQ(events_of({{cuda(0)}, {cpu()}}), kGpuCpuBackward);
  EXPECT_EQ(events_of({{xpu(0)}, {cpu()}}), kGpuCpuBackward);
}

TEST(ClassifyBackwardPass, DistinctDevicesAreTypeAndIndex) {
  EXPECT_EQ(events_of({{cuda(0)}, {cuda(1)}}), kMultiDeviceBackward);
  EXPECT_EQ(events_of({{cuda(0)}, {xpu(0)}}), kMultiDeviceBackward);
  EXPECT_EQ(events_of({{cuda(1)}, {cuda(1)}}), kNoBackwardDeviceEvent);
}

TEST(ClassifyBackwardPass, TwoAcceleratorsAndCpuDecideBoth) {
  EXPECT_EQ(
      events_of({{cuda(0)}, {cuda(1)}, {cpu()}}), kAllBackwardDeviceEvents);
}

TEST(ClassifyBackwardPass, DecisionDoesNotDependOnOrder) {
  std::vector<NodePtr> owned = {
      make_node({cpu()}),
      make_node({cuda(0)}),
      make_node({}),
      make_node({meta()}),
      make_node({cuda(0), cpu()}),
      make_node({xpu(1)})};
  std::vector<const Node*> order = raw(owned);
  std::sort(order.begin(), order.end());
  size_t permutations = 0;
  do {
    for (uint8_t wanted = 0; wanted <= kAllBackwardDeviceEvents; ++wanted) {
      const uint8_t events =
          classify_backward_pass(nullptr, order, wanted).events();
      ASSERT_EQ(events & wanted, kAllBackwardDeviceEvents & wanted);
    }
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 720u);
}

TEST(ClassifyBackwardPass, StopsOnceEveryWantedEventIsDecided) {
  std::vector<NodePtr> owned = {make_node({cuda(0)}), make_node({cpu()})};
  for (int i = 0; i < 50; ++i) {
    owned.push_back(make_node({cpu()}));
  }
  const auto nodes = raw(owned);
  EXPECT_EQ(
      classify_backward_pass(nullptr, nodes, kGpuCpuBackward).nodes_inspected,
      2u);
  // The multi-device question stays open on CPU nodes: every node is read.
  EXPECT_EQ(
      classify_backward_pass(nullptr, nodes, kMultiDeviceBackward)
          .nodes_inspected,
      nodes.size());
  EXPECT_EQ(
      classify_backward_pass(nullptr, nodes, kNoBackwardDeviceEvent)
          .nodes_inspected,
      0u);
}

TEST(ClassifyBackwardPass, StoppingEarlyCountsOnlyTheNodesOfThePass) {
  // A partial pass that stops early (Note [The settled-device fast path])
  // counts the nodes it read before the stop, which leaves out the nodes
  // below min_topo_nr that it skipped on the way.
  auto leaf = make_node({}); // topological_nr 0
  std::vector<NodePtr> owned;
  std::vector<const Node*> nodes;
  const auto add = [&](c10::Device device, bool in_pass) {
    owned.push_back(make_node({device}));
    if (in_pass) {
      connect(owned.back(), leaf); // topological_nr 1
    }
    nodes.push_back(owned.back().get());
  };
  add(cpu(), false);
  add(cpu(), true);
  add(cpu(), false);
  add(cuda(0), false);
  add(cuda(0), true);
  add(cpu(), true);
  const auto summary = classify_backward_pass(
      nullptr, nodes, kGpuCpuBackward, /*min_topo_nr=*/1);
  EXPECT_EQ(summary.events(), kGpuCpuBackward);
  EXPECT_EQ(summary.nodes_inspected, 2u);
}

TEST(ClassifyBackwardPass, RootInTheSetIsReadAgainWithTheSameDecision) {
  // The engine's walk never puts the root into nodes_in_graph_; the
  // classifier does not look for it there (Note [Keeping the per-node cost of
  // classification low]), and reading it twice decides nothing differently.
  auto root = make_node({cuda(0)});
  auto other = make_node({cpu()});
  const std::vector<const Node*> without_root = {other.get()};
  const std::vector<const Node*> with_root = {other.get(), root.get()};
  const auto a = classify_backward_pass(
      root.get(), without_root, kAllBackwardDeviceEvents);
  const auto b =
      classify_backward_pass(root.get(), with_root, kAllBackwardDeviceEvents);
  EXPECT_EQ(a.nodes_inspected, 2u);
  EXPECT_EQ(b.nodes_inspected, 3u);
  EXPECT_EQ(a.events(), kGpuCpuBackward);
  EXPECT_EQ(b.events(), kGpuCpuBackward);
}

// --- The patched compute_dependencies on hand-made graphs
// ---------------------

// Runs the bound compute_dependencies on a star: root -> each listed node.
void run_star_pass(
    std::initializer_list<c10::Device> root_devices,
    std::initializer_list<std::initializer_list<c10::Device>> children) {
  NodePtr root = make_node(root_devices);
  std::vector<NodePtr> owned;
  for (const auto& devices : children) {
    owned.push_back(make_node(devices));
    connect(root, owned.back());
  }
  auto task = make_graph_task(root.get());
  run_bound_compute_dependencies(root.get(), *task);
}

// Runs the bound compute_dependencies on a star: a cuda:0 root -> 10 CPU
// nodes.
void run_star_pass_of_ten_cpu_children() {
  const std::initializer_list<c10::Device> c = {cpu()};
  run_star_pass({cuda(0)}, {c, c, c, c, c, c, c, c, c, c});
}

TEST(PatchedComputeDependencies, IsTheDefinitionLibtorchBinds) {
  EXPECT_NE(
      bound_compute_dependencies_path().find("libautograd_device_logging"),
      std::string::npos)
      << bound_compute_dependencies_path();
  const DeviceLoggingStatus status = device_logging_status();
  EXPECT_EQ(status.disabled_reason, "");
  EXPECT_EQ(status.built_for_torch, status.running_torch);
}

TEST(PatchedComputeDependencies, ShowConfigNamesTheRunningVersion) {
  // Releases without <caffe2/core/common.h> read the running version from
  // at::show_config() (Note [Where the running torch's version is read]);
  // on this one, it names the same version as the build options.
  const DeviceLoggingStatus status = device_logging_status();
  ASSERT_FALSE(status.running_torch.empty());
  EXPECT_NE(
      at::show_config().find("TORCH_VERSION=" + status.running_torch),
      std::string::npos);
}

TEST(PatchedComputeDependencies, KeepsLibtorchsDependencyWalk) {
  register_two_test_devices();
  // a -> b -> d, a -> c -> d: d has two dependencies.
  auto a = make_node({cuda(0)});
  auto b = make_node({cuda(0)});
  auto c = make_node({cpu()});
  auto d = make_node({cuda(1)});
  connect(b, d);
  connect(c, d);
  connect(a, b);
  connect(a, c);
  auto task = make_graph_task(a.get());
  run_bound_compute_dependencies(a.get(), *task);
  EXPECT_EQ(task->dependencies_.at(b.get()), 1);
  EXPECT_EQ(task->dependencies_.at(c.get()), 1);
  EXPECT_EQ(task->dependencies_.at(d.get()), 2);
  EXPECT_EQ(task->nodes_in_graph_.count(d.get()), 1u);
  EXPECT_TRUE(device_logging_status().active);
}

TEST(PatchedComputeDependencies, CpuOnlyPassEmitsNothing) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  run_star_pass({cpu()}, {{cpu()}, {cpu(), cpu()}, {}});
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_EQ(device_logging_status().events_raised, 0);
  EXPECT_EQ(device_logging_status().nodes_inspected, 4u);
}

// "Nothing emitted" means something only if the hook read the pass: each of
// these cases also checks that every node of the pass was read.
TEST(PatchedComputeDependencies, OneAcceleratorWithoutCpuEmitsNothing) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  run_star_pass({cuda(0)}, {{cuda(0)}, {cuda(0), cpu()}});
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_TRUE(device_logging_status().active);
  EXPECT_EQ(device_logging_status().nodes_inspected, 3u);
  EXPECT_EQ(device_logging_status().events_raised, 0);
}

TEST(PatchedComputeDependencies, MetaPlusCpuEmitsNothing) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  run_star_pass({meta()}, {{cpu()}, {meta()}, {lazy()}});
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_TRUE(device_logging_status().active);
  EXPECT_EQ(device_logging_status().nodes_inspected, 4u);
  EXPECT_EQ(device_logging_status().events_raised, 0);
}

// What the library adds to C10_LOG_API_USAGE_ONCE (whose static alone already
// logs each event at most once per process): which events it emitted, the
// logger called for an event in the very pass that decides it, and no
// inspection once both fired.
TEST(PatchedComputeDependencies, OnceOnlyStateIsTheLibrarys) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  run_star_pass({cuda(0)}, {{cpu()}});
  EXPECT_EQ(device_logging_status().events_raised, kGpuCpuBackward);
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kGpuCpu});
  // gpu_cpu is done: a pass that only repeats it is read for multidevice
  // alone, to its end, and logs nothing more.
  const uint64_t before = device_logging_status().nodes_inspected;
  run_star_pass_of_ten_cpu_children();
  EXPECT_EQ(device_logging_status().nodes_inspected - before, 11u);
  EXPECT_EQ(recorder.events().size(), 1u);
  run_star_pass({cuda(1)}, {{cuda(0)}});
  EXPECT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
  EXPECT_EQ(recorder.events(), (std::vector<std::string>{kGpuCpu, kMulti}));
  // Both done: the state word stops every later pass before any read.
  const uint64_t done = device_logging_status().nodes_inspected;
  for (int i = 0; i < 50; ++i) {
    run_star_pass({cuda(0)}, {{cuda(1)}, {cpu()}});
  }
  EXPECT_EQ(device_logging_status().nodes_inspected, done);
  EXPECT_EQ(recorder.events().size(), 2u);
}

TEST(PatchedComputeDependencies, AcceleratorRegisteredAfterAPassIsSeen) {
  // The device scan is not cached across passes (Note [Skipping processes
  // without accelerators]): a backend that registers after the first pass
  // (a Python import, a dlopen) must be seen by the next one.
  ApiUsageRecorder recorder;
  run_star_pass({cpu()}, {{cuda(0)}, {cuda(1)}});
  ASSERT_TRUE(device_logging_status().active);
  EXPECT_EQ(device_logging_status().nodes_inspected, 0u);
  register_two_test_devices();
  run_star_pass({cpu()}, {{cuda(0)}, {cuda(1)}});
  EXPECT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
  EXPECT_EQ(recorder.count(kMulti), 1u);
}

TEST(PatchedComputeDependencies, AcceleratorAndCpuEmitGpuCpuOnly) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  run_star_pass({cuda(0)}, {{cpu()}});
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kGpuCpu});
}

TEST(PatchedComputeDependencies, TwoAcceleratorsEmitMultideviceOnly) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  run_star_pass({cuda(0)}, {{cuda(1)}, {cuda(1), cpu()}});
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kMulti});
}

TEST(PatchedComputeDependencies, TwoAcceleratorsAndCpuEmitBothInOnePass) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  run_star_pass({cpu()}, {{xpu(0)}, {cuda(1)}});
  EXPECT_EQ(recorder.count(kMulti), 1u);
  EXPECT_EQ(recorder.count(kGpuCpu), 1u);
  EXPECT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
}

TEST(PatchedComputeDependencies, RepeatedPassesEmitEachEventOnce) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  for (int i = 0; i < 20; ++i) {
    run_star_pass({cuda(0)}, {{cpu()}});
    run_star_pass({cuda(0)}, {{cuda(1)}});
    run_star_pass({cpu()}, {{cuda(0)}, {cuda(1)}});
  }
  EXPECT_EQ(recorder.count(kMulti), 1u);
  EXPECT_EQ(recorder.count(kGpuCpu), 1u);
  EXPECT_EQ(recorder.events().size(), 2u);
}

TEST(PatchedComputeDependencies, AfterBothFiredNoNodeIsInspected) {
  register_two_test_devices();
  run_star_pass({cpu()}, {{cuda(0)}, {cuda(1)}});
  ASSERT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
  const uint64_t inspected = device_logging_status().nodes_inspected;
  for (int i = 0; i < 100; ++i) {
    run_star_pass({cpu()}, {{cuda(0)}, {cuda(1)}, {cpu()}, {xpu(0)}});
  }
  EXPECT_EQ(device_logging_status().nodes_inspected, inspected);
}

TEST(PatchedComputeDependencies, AfterOneFiredOnlyTheOtherIsPursued) {
  register_two_test_devices();
  // Fire gpu_cpu only.
  run_star_pass({cuda(0)}, {{cpu()}});
  ASSERT_EQ(device_logging_status().events_raised, kGpuCpuBackward);
  // Root on cuda:0 and 10 CPU nodes: gpu_cpu would be decided after two
  // nodes, but only multidevice is pending, so every node is read.
  const uint64_t before = device_logging_status().nodes_inspected;
  run_star_pass_of_ten_cpu_children();
  EXPECT_EQ(device_logging_status().nodes_inspected - before, 11u);
  // A second accelerator decides it.
  run_star_pass({cuda(0)}, {{cuda(1)}});
  EXPECT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
}

TEST(PatchedComputeDependencies, InsideAPassReadingStopsWhenDecided) {
  register_two_test_devices();
  // Fire multidevice only.
  run_star_pass({cuda(0)}, {{cuda(1)}});
  ASSERT_EQ(device_logging_status().events_raised, kMultiDeviceBackward);
  const uint64_t before = device_logging_status().nodes_inspected;
  // Root on cuda:0 with 10 CPU children: the root and whichever child comes
  // first decide gpu_cpu.
  run_star_pass_of_ten_cpu_children();
  EXPECT_EQ(device_logging_status().nodes_inspected - before, 2u);
  EXPECT_EQ(device_logging_status().events_raised, kAllBackwardDeviceEvents);
}

TEST(PatchedComputeDependencies, MinTopoNrPruningIsRespected) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  // root(cuda:0) -> x(cuda:0) -> y(cuda:1); topological_nr: y 0, x 1, root 2.
  auto root = make_node({cuda(0)});
  auto x = make_node({cuda(0)});
  auto y = make_node({cuda(1)});
  connect(x, y);
  connect(root, x);
  ASSERT_EQ(root->topological_nr(), 2u);
  auto pruned = make_graph_task(root.get());
  run_bound_compute_dependencies(root.get(), *pruned, /*min_topo_nr=*/2);
  // The walk reached x but did not expand it, so y is not part of the pass.
  ASSERT_EQ(pruned->nodes_in_graph_.count(x.get()), 1u);
  ASSERT_EQ(pruned->nodes_in_graph_.count(y.get()), 0u);
  EXPECT_TRUE(recorder.events().empty());
  auto full = make_graph_task(root.get());
  run_bound_compute_dependencies(root.get(), *full, /*min_topo_nr=*/0);
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kMulti});
}

TEST(
    PatchedComputeDependencies,
    NodeBelowMinTopoNrOnAnotherDeviceIsNotCounted) {
  // Note [Nodes below min_topo_nr are not part of the pass]: the boundary
  // node sits on a device nothing else in the pass uses, so counting it
  // would decide multidevice.
  register_two_test_devices();
  ApiUsageRecorder recorder;
  auto boundary = make_node({cuda(1)});
  auto root = make_node({cuda(0)});
  connect(root, boundary);
  ASSERT_EQ(boundary->topological_nr(), 0u);
  ASSERT_EQ(root->topological_nr(), 1u);
  auto partial = make_graph_task(root.get());
  run_bound_compute_dependencies(root.get(), *partial, /*min_topo_nr=*/1);
  // The walk reached the boundary node (it is in the set) but it is below
  // min_topo_nr: only the root is read, and nothing is emitted.
  ASSERT_EQ(partial->nodes_in_graph_.count(boundary.get()), 1u);
  EXPECT_TRUE(recorder.events().empty());
  EXPECT_EQ(device_logging_status().nodes_inspected, 1u);
  // The same graph as a full pass spans both devices.
  auto full = make_graph_task(root.get());
  run_bound_compute_dependencies(root.get(), *full, /*min_topo_nr=*/0);
  EXPECT_EQ(recorder.events(), std::vector<std::string>{kMulti});
}

TEST(PatchedComputeDependencies, NoAcceleratorInProcessMeansNoInspection) {
  // No device guard reports a device here (no register_two_test_devices()),
  // so even metadata naming two accelerators and the CPU is not read: no
  // real pass in this process could be routed to a device thread.
  ApiUsageRecorder recorder;
  for (int i = 0; i < 10; ++i) {
    run_star_pass({cpu()}, {{cuda(0)}, {cuda(1)}});
  }
  // Torch 2.14+ logs by the metadata alone, even here, where no real pass
  // could carry it (Note [The events' tests where torch logs them itself]).
  if (!detail::kTorchLogsTheEvents) {
    EXPECT_TRUE(recorder.events().empty());
  }
  EXPECT_EQ(device_logging_status().events_raised, kNoBackwardDeviceEvent);
  EXPECT_EQ(device_logging_status().nodes_inspected, 0u);
  EXPECT_TRUE(device_logging_status().active);
}

// --- Real backward passes through libtorch's Engine::execute ---------------

TEST(RealBackward, CpuGradientsAreExactAndNothingIsLogged) {
  ApiUsageRecorder recorder;
  torch::manual_seed(0);
  auto x = torch::randn({4, 3}, torch::requires_grad());
  auto w = torch::randn({3, 5}, torch::requires_grad());
  auto loss = torch::tanh(torch::mm(x, w)).pow(2).sum();
  loss.backward();
  // The same gradients written out with forward ops only.
  auto h = torch::tanh(torch::mm(x.detach(), w.detach()));
  auto grad_pre = 2 * h * (1 - h * h);
  EXPECT_TRUE(torch::allclose(x.grad(), torch::mm(grad_pre, w.detach().t())));
  EXPECT_TRUE(torch::allclose(w.grad(), torch::mm(x.detach().t(), grad_pre)));
  // And bitwise against torch::autograd::grad of the same graph.
  auto again = torch::tanh(torch::mm(x, w)).pow(2).sum();
  auto grads = torch::autograd::grad({again}, {x, w});
  EXPECT_TRUE(torch::equal(grads[0], x.grad()));
  EXPECT_TRUE(torch::equal(grads[1], w.grad()));

  const DeviceLoggingStatus status = device_logging_status();
  EXPECT_TRUE(status.active) << "libtorch did not call the patch";
  EXPECT_EQ(status.events_raised, 0);
  EXPECT_TRUE(recorder.events().empty());
}

TEST(RealBackward, CpuPassWithTestDevicesRegisteredIsInspectedButSilent) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  auto x = torch::ones({2}, torch::requires_grad());
  (x * 3).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), torch::full({2}, 3.0)));
  EXPECT_GT(device_logging_status().nodes_inspected, 0u);
  EXPECT_TRUE(recorder.events().empty());
}

// --- Property test: random DAGs against a brute-force model ------------------

// The reference model, written independently of the library: the walk's
// visited set by its own DFS, the routing rule spelled out, the events by
// definition over sets.
struct ReferenceGraph {
  std::vector<std::vector<c10::Device>> inputs; // per node
  std::vector<std::vector<int>> children;       // per node, indices
};

std::pair<bool, bool> reference_events(
    const ReferenceGraph& g,
    const std::vector<NodePtr>& nodes,
    int root,
    uint64_t min_topo_nr) {
  std::set<int> visited = {root};
  std::vector<int> stack = {root};
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (nodes[n]->topological_nr() < min_topo_nr) {
      continue; // reached, not expanded
    }
    for (int child : g.children[n]) {
      if (visited.insert(child).second) {
        stack.push_back(child);
      }
    }
  }
  std::set<std::pair<int, int>> accelerators;
  bool cpu = false;
  for (int n : visited) {
    if (n != root && nodes[n]->topological_nr() < min_topo_nr) {
      continue; // reached, but on no path to an output edge: not counted
    }
    const auto& devices = g.inputs[n];
    if (devices.empty()) {
      continue;
    }
    auto first =
        std::find_if(devices.begin(), devices.end(), [](c10::Device d) {
          return d.type() != c10::DeviceType::CPU;
        });
    if (first == devices.end() || first->type() == c10::DeviceType::Meta ||
        first->type() == c10::DeviceType::Lazy) {
      cpu = true;
    } else {
      accelerators.insert({static_cast<int>(first->type()), first->index()});
    }
  }
  return {accelerators.size() >= 2, !accelerators.empty() && cpu};
}

// Random DAGs for the property tests: node inputs on random devices (mostly
// CPU-like and cuda:0, so that events fire late), random edges, and a random
// min_topo_nr as partial passes have.
struct RandomPass {
  ReferenceGraph g;
  std::vector<NodePtr> nodes;
  int root = 0;
  uint64_t min_topo_nr = 0;
};

class RandomPassGenerator {
 public:
  explicit RandomPassGenerator(uint32_t seed) : rng_(seed) {}

  RandomPass next() {
    RandomPass pass;
    const int n = pick_size_(rng_);
    for (int k = 0; k < n; ++k) {
      std::vector<c10::Device> devices;
      const int inputs = pick_inputs_(rng_);
      for (int i = 0; i < inputs; ++i) {
        // Mostly CPU-like and cuda:0; the other accelerators rarely.
        int d = pick_device_(rng_) % 4;
        if (rare_device_(rng_)) {
          d = pick_device_(rng_);
        }
        devices.push_back(kChoices[d]);
      }
      NodePtr node = make_node({});
      for (const auto& device : devices) {
        add_device_input(*node, device);
      }
      std::vector<int> children;
      for (int c = 0; c < k; ++c) {
        if (edge_(rng_)) {
          children.push_back(c);
          connect(node, pass.nodes[c]);
        }
      }
      pass.g.inputs.push_back(devices);
      pass.g.children.push_back(children);
      pass.nodes.push_back(node);
    }
    pass.root = n - 1;
    std::uniform_int_distribution<uint64_t> pick_min(
        0, pass.nodes[pass.root]->topological_nr());
    pass.min_topo_nr = pick_min(rng_);
    return pass;
  }

  std::mt19937& rng() {
    return rng_;
  }

 private:
  const std::array<c10::Device, 7> kChoices =
      {cpu(), meta(), lazy(), cuda(0), cuda(1), xpu(0), xpu(1)};
  std::mt19937 rng_;
  std::uniform_int_distribution<int> pick_device_{0, 6};
  std::uniform_int_distribution<int> pick_inputs_{0, 3};
  std::uniform_int_distribution<int> pick_size_{1, 12};
  std::bernoulli_distribution edge_{0.3};
  std::bernoulli_distribution rare_device_{0.02};
};

uint8_t expected_events(const RandomPass& pass) {
  const auto [multi, gpu_cpu] =
      reference_events(pass.g, pass.nodes, pass.root, pass.min_topo_nr);
  return (multi ? kMultiDeviceBackward : 0) | (gpu_cpu ? kGpuCpuBackward : 0);
}

TEST(Property, HundredThousandRandomDagsMatchTheReferenceModel) {
  register_two_test_devices();
  ApiUsageRecorder recorder;
  RandomPassGenerator generator(20261130);
  uint8_t expected_emitted = 0;
  int mismatches = 0;
  int classifier_disagreements = 0;
  int graphs_with_multi = 0;
  int graphs_with_gpu_cpu = 0;
  for (int graph = 0; graph < 100000; ++graph) {
    const RandomPass pass = generator.next();
    const auto& nodes = pass.nodes;
    const int root = pass.root;
    const uint64_t min_topo_nr = pass.min_topo_nr;
    auto task = make_graph_task(nodes[root].get());
    run_bound_compute_dependencies(nodes[root].get(), *task, min_topo_nr);
    const uint8_t expected = expected_events(pass);
    const bool multi = expected & kMultiDeviceBackward;
    const bool gpu_cpu = expected & kGpuCpuBackward;
    // The classifier on what libtorch's walk built decides like the model...
    const uint8_t decided =
        census_backward_pass(
            nodes[root].get(), task->nodes_in_graph_, min_topo_nr)
            .events();
    const uint8_t early = classify_backward_pass(
                              nodes[root].get(),
                              task->nodes_in_graph_,
                              kAllBackwardDeviceEvents,
                              min_topo_nr)
                              .events();
    // ...and the statistics' census and the early-stopping classifier agree
    // on every event a pass may still want (one event already fired, or
    // both, or neither).
    for (uint8_t wanted = kMultiDeviceBackward;
         wanted <= kAllBackwardDeviceEvents;
         ++wanted) {
      const uint8_t partial =
          classify_backward_pass(
              nodes[root].get(), task->nodes_in_graph_, wanted, min_topo_nr)
              .events();
      if ((partial & wanted) != (decided & wanted)) {
        ++classifier_disagreements;
      }
    }
    // ...and the library has emitted exactly the union so far.
    expected_emitted |= expected;
    graphs_with_multi += multi;
    graphs_with_gpu_cpu += gpu_cpu;
    if (decided != expected || early != expected ||
        device_logging_status().events_raised != expected_emitted) {
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(classifier_disagreements, 0);
  EXPECT_EQ(expected_emitted, kAllBackwardDeviceEvents);
  // The random graphs cover both answers of both questions.
  EXPECT_GT(graphs_with_multi, 100);
  EXPECT_LT(graphs_with_multi, 90000);
  EXPECT_GT(graphs_with_gpu_cpu, 100);
  EXPECT_LT(graphs_with_gpu_cpu, 90000);
  EXPECT_EQ(recorder.count(kMulti), 1u);
  EXPECT_EQ(recorder.count(kGpuCpu), 1u);
}

// The hook itself, not only the pure functions, on every random graph: before
// each pass the once-per-process logic is put back to "nothing fired" or to
// "one event already fired" (reset_raised_events_for_testing), so that every
// pass runs the full per-pass path with a random pending mask.
TEST(Property, HookOnFreshOrPartlyFiredStateMatchesTheModel) {
  register_two_test_devices();
  RandomPassGenerator generator(20261201);
  const std::array<uint8_t, 3> already_emitted = {
      kNoBackwardDeviceEvent, kMultiDeviceBackward, kGpuCpuBackward};
  std::uniform_int_distribution<int> pick_already(0, 2);
  int mismatches = 0;
  int passes_that_emitted = 0;
  for (int graph = 0; graph < 30000; ++graph) {
    RandomPass pass = generator.next();
    const uint8_t already = already_emitted[pick_already(generator.rng())];
    reset_raised_events_for_testing(already);
    const uint64_t inspected_before = device_logging_status().nodes_inspected;
    auto task = make_graph_task(pass.nodes[pass.root].get());
    run_bound_compute_dependencies(
        pass.nodes[pass.root].get(), *task, pass.min_topo_nr);
    const uint8_t emitted = device_logging_status().events_raised;
    // A pass that does not raise every pending event reads to its end: the
    // root and every node at or above min_topo_nr, none of those it skipped
    // below it. One that does may stop early, after reading at least one.
    uint64_t whole_pass = 1;
    for (const Node* node : task->nodes_in_graph_) {
      whole_pass += node->topological_nr() >= pass.min_topo_nr;
    }
    const uint8_t pending = kAllBackwardDeviceEvents & ~already;
    const uint64_t read =
        device_logging_status().nodes_inspected - inspected_before;
    const bool reads_to_the_end = (expected_events(pass) & pending) != pending;
    if (emitted != (already | expected_events(pass)) ||
        (reads_to_the_end ? read != whole_pass
                          : (read == 0 || read > whole_pass))) {
      ++mismatches;
    }
    passes_that_emitted += emitted != already;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(passes_that_emitted, 100);
  EXPECT_EQ(device_logging_status().disabled_reason, "");
}

TEST(DeviceStats, CpuOnlyProcessCountsPassesWithoutReadingNodes) {
  // ctest runs this binary with CUDA_VISIBLE_DEVICES= (test/CMakeLists.txt),
  // so this holds on machines with GPUs too.
  const auto* cuda_guard =
      c10::impl::device_guard_impl_registry[static_cast<size_t>(
                                                c10::DeviceType::CUDA)]
          .load();
  ASSERT_TRUE(cuda_guard == nullptr || cuda_guard->deviceCount() == 0);
  enable_backward_device_stats();
  for (int i = 0; i < 3; ++i) {
    auto x = torch::ones({2}, torch::requires_grad());
    (x * x).sum().backward();
  }
  const BackwardDeviceStats stats = backward_device_stats();
  EXPECT_EQ(stats.cpu_only, 3u);
  EXPECT_EQ(stats.passes(), 3u);
  EXPECT_EQ(device_logging_status().nodes_inspected, 0u);
}

TEST(PassDeviceCensus, CountsDistinctAcceleratorsAndClasses) {
  std::vector<NodePtr> owned = {
      make_node({cuda(0)}),
      make_node({cuda(1)}),
      make_node({cuda(0)}),
      make_node({xpu(0)}),
      make_node({meta()}),
      make_node({})};
  const auto census = census_backward_pass(nullptr, raw(owned));
  EXPECT_EQ(census.num_accelerators, 3);
  EXPECT_TRUE(census.has_cpu_node);
  EXPECT_EQ(census.nodes_inspected, owned.size());
  EXPECT_EQ(census.device_class(), BackwardDeviceClass::kMultiAccelerator);
  EXPECT_EQ(census.events(), kAllBackwardDeviceEvents);

  std::vector<NodePtr> single = {
      make_node({cuda(1)}), make_node({cuda(1), cpu()})};
  EXPECT_EQ(
      census_backward_pass(nullptr, raw(single)).device_class(),
      BackwardDeviceClass::kSingleAccelerator);
  std::vector<NodePtr> mixed = {make_node({cuda(1)}), make_node({cpu()})};
  EXPECT_EQ(
      census_backward_pass(nullptr, raw(mixed)).device_class(),
      BackwardDeviceClass::kAcceleratorCpu);
  std::vector<NodePtr> cpu_only = {make_node({cpu()}), make_node({lazy()})};
  EXPECT_EQ(
      census_backward_pass(nullptr, raw(cpu_only)).device_class(),
      BackwardDeviceClass::kCpuOnly);
}

TEST(PassDeviceCensus, SaturatesInsteadOfAllocating) {
  std::vector<NodePtr> owned;
  for (int i = 0; i < 40; ++i) {
    owned.push_back(make_node({cuda(static_cast<c10::DeviceIndex>(i))}));
  }
  const auto census = census_backward_pass(nullptr, raw(owned));
  EXPECT_EQ(census.num_accelerators, PassDeviceCensus::kMaxCountedAccelerators);
  EXPECT_EQ(census.nodes_inspected, 40u);
}

} // namespace
} // namespace torch::autograd::device_logging
