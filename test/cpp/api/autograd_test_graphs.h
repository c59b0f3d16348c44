#pragma once

// Hand-made autograd graphs for the device-logging tests: Nodes whose input
// metadata name devices (no real device needed), GraphTasks built outside the
// engine, and a call of compute_dependencies resolved the way libtorch's
// Engine::execute resolves it.

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/interposition.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace torch::autograd::device_logging::testing {

// A node that takes one gradient per device listed, with that device in its
// input metadata. It is never executed.
struct DeviceTestNode : Node {
  explicit DeviceTestNode(std::initializer_list<c10::Device> input_devices);
  variable_list apply(variable_list&& grads) override;
  std::string name() const override {
    return "DeviceTestNode";
  }
};

// Owning pointer type of this torch's Edge (shared_ptr before 2.13,
// intrusive_ptr from 2.13 on).
using NodePtr = decltype(std::declval<Edge>().function);

NodePtr make_node(std::initializer_list<c10::Device> input_devices);
// Appends an input whose metadata names `device`.
void add_device_input(Node& node, c10::Device device);
// Adds the edge parent -> child (child computes after parent in backward).
// Build bottom-up: Node fixes its topological_nr once it has a parent.
void connect(const NodePtr& parent, const NodePtr& child);

// A GraphTask as Engine::execute would create it for `root`, outside the
// engine (libtorch does not export GraphTask's constructor, so the test
// library defines one).
std::unique_ptr<GraphTask> make_graph_task(Node* root);

// The Engine::compute_dependencies that the dynamic linker binds for libtorch
// (the first definition in lookup order), called on the default engine.
void run_bound_compute_dependencies(
    Node* root,
    GraphTask& task,
    uint64_t min_topo_nr = 0);

// Path of the object defining the bound Engine::compute_dependencies.
std::string bound_compute_dependencies_path();

// Makes the process report two PrivateUse1 devices through c10's device guard
// registry, as a process with an accelerator does. Graphs whose metadata name
// devices are only classified in such a process (Note [Skipping processes
// without accelerators]).
void register_two_test_devices();

// The two autograd device events, recorded from now on through
// c10::SetAPIUsageLogger.
class ApiUsageRecorder {
 public:
  ApiUsageRecorder();
  // Events recorded so far, in order.
  std::vector<std::string> events() const;
  size_t count(const std::string& event) const;
};

// Walks the graph of `output` (every node reachable from its grad_fn) and
// returns how many inputs' stream device differs from their metadata device
// (Note [Reading an input's device through its stream]); `*inputs_read` gets
// how many inputs were compared.
size_t count_inputs_whose_stream_device_differs(
    const at::Tensor& output,
    size_t* inputs_read);

c10::Device cpu();
c10::Device cuda(c10::DeviceIndex index);
c10::Device xpu(c10::DeviceIndex index);
c10::Device meta();
c10::Device lazy();

} // namespace torch::autograd::device_logging::testing

// Note [The events' tests where torch logs them itself]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Built against torch 2.14 or later, the library classifies every pass as
// on earlier releases and leaves the logging to torch (Note [Where torch
// logs the events itself]), so the cases about what it decides (the events
// it says a pass raised, what it reads, when it stops) run there too, and
// what an API-usage logger receives is torch's own events, which agree with
// the library's. Only the cases about a disabled library staying silent
// have nothing of the library's to check there: torch logs the events
// whether or not the library is disabled. Those skip, saying so.
#define SKIP_WHERE_TORCH_LOGS_THE_EVENTS()                                \
  do {                                                                    \
    if (::torch::autograd::device_logging::detail::kTorchLogsTheEvents) { \
      GTEST_SKIP() << "torch >= 2.14 logs the events itself, also where " \
                      "this library is disabled: a disabled library's "   \
                      "silence is not this library's to check there";     \
    }                                                                     \
  } while (false)
