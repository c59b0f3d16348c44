#pragma once

// The device-set classifier of the autograd device-logging patch: pure
// functions over autograd Nodes, with no global state, so that they can be
// unit-tested on hand-made graphs without an engine.

#include <torch/csrc/autograd/function.h>

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/macros/Macros.h>

#include <array>
#include <cstdint>
#include <optional>

namespace torch::autograd::device_logging {

// The two once-per-process API-usage events, as bits.
enum BackwardDeviceEvent : uint8_t {
  kNoBackwardDeviceEvent = 0,
  // The pass spans two or more distinct accelerator devices.
  kMultiDeviceBackward = 1u << 0,
  // The pass has an accelerator device and at least one CPU-routed node.
  kGpuCpuBackward = 1u << 1,
  kAllBackwardDeviceEvents = kMultiDeviceBackward | kGpuCpuBackward,
};

constexpr const char* kMultiDeviceBackwardEventName =
    "torch.autograd.multidevice_backward";
constexpr const char* kGpuCpuBackwardEventName =
    "torch.autograd.gpu_cpu_backward";

// Note [Which events a pass's devices imply]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The one definition of both events, which every classifier below asks: a
// pass whose nodes are routed to `distinct_accelerators` distinct accelerator
// devices (any count of 2 or more decides the same) and, if
// `has_cpu_node`, also to the CPU ready queue.
constexpr uint8_t backward_device_events(
    int distinct_accelerators,
    bool has_cpu_node) noexcept {
  return (distinct_accelerators >= 2 ? kMultiDeviceBackward : 0) |
      (distinct_accelerators >= 1 && has_cpu_node ? kGpuCpuBackward : 0);
}

// Note [Where the engine runs a node]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine picks a ready queue for a node from the device of the node's
// input buffer: the first input whose device is not the CPU wins, and the CPU
// is reported only when no input names another device. Ready queues exist for
// the CPU (one per GraphTask) and one per accelerator device index; device
// types the engine deliberately keeps on the CPU queue (CPU, Meta, Lazy) never
// get a device thread. The classifier applies the same rule to a node's input
// metadata, which describes exactly those inputs before any gradient exists,
// so its answer is "where this node would run", not "which tensors it saw".
// Note that the rule looks only at the first non-CPU input: a node with inputs
// (meta, cuda:0) is routed by meta, i.e. to the CPU queue, as in the engine.

// True for device types whose nodes the engine runs on the CPU ready queue.
constexpr bool runs_on_cpu_ready_queue(c10::DeviceType type) noexcept {
  return type == c10::DeviceType::CPU || type == c10::DeviceType::Meta ||
      type == c10::DeviceType::Lazy;
}

// Note [Reading an input's device through its stream]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// InputMetadata::device() answers through TensorOptions::device(), which
// builds std::optional temporaries; GCC keeps them in memory (it does not
// scalarize the optional's union), so every input read costs about ten dead
// stack stores, a third of the classifier's per-node cost. Every
// InputMetadata constructor sets its stream from the guard of the same
// device (a default-constructed one: the CPU's default stream), so the
// stream's device is that device, read as two plain bytes. The unit tests pin
// that equality for CPU, Meta, the test accelerator and (on machines with
// NVIDIA GPUs) CUDA tensors.
inline c10::Device input_device(const Node& node, uint32_t input_nr) noexcept {
  return node.input_metadata(input_nr).stream().device();
}

// Where the engine would queue a node (Note [Where the engine runs a node]).
enum class NodeQueue : uint8_t {
  kNone, // no input metadata: the node takes no gradient, no device signal
  kCpu,  // the CPU ready queue
  kAccelerator, // the ready queue of one accelerator device
};

// The queue the engine would pick for a node, and for kAccelerator the
// accelerator device. A plain struct, so the compiler keeps it in registers.
struct NodeRoute {
  NodeQueue queue;
  c10::Device device{c10::DeviceType::CPU};
};

// The queue of a node whose routing input (its first non-CPU input, or any
// input when all are on the CPU) is on `input`.
inline NodeRoute route_of_input(c10::Device input) noexcept {
  if (runs_on_cpu_ready_queue(input.type())) {
    return {NodeQueue::kCpu};
  }
  return {NodeQueue::kAccelerator, input};
}

inline NodeRoute route_of(const Node& node) noexcept {
  const uint32_t num_inputs = node.num_inputs();
  if (num_inputs == 0) {
    return {NodeQueue::kNone};
  }
  for (uint32_t i = 0; i < num_inputs; ++i) {
    // Placeholders for unused inputs are default-constructed metadata whose
    // device is the CPU, so they never win, as undefined gradients never do
    // in the engine's input buffer.
    const c10::Device input = input_device(node, i);
    if (input.type() != c10::DeviceType::CPU) {
      return route_of_input(input);
    }
  }
  return {NodeQueue::kCpu};
}

// Where the engine would run `node`: a CPU device for nodes routed to the CPU
// ready queue, the accelerator device otherwise, and nullopt for a node with
// no input metadata (it takes no gradient, so it carries no device signal).
inline std::optional<c10::Device> routed_device(const Node& node) noexcept {
  const NodeRoute route = route_of(node);
  if (route.queue == NodeQueue::kNone) {
    return std::nullopt;
  }
  return route.device; // the CPU for NodeQueue::kCpu
}

// What a backward pass's nodes have shown so far. Holds no container: two
// distinct accelerators already decide "two or more", so the first one seen
// and a flag for any other are all the multi-device question needs.
struct PassDeviceSummary {
  // Meaningful only when has_accelerator is set.
  c10::Device first_accelerator{c10::DeviceType::CPU};
  bool has_accelerator = false;
  bool has_other_accelerator = false;
  bool has_cpu_node = false;
  // Node reads (the root counts when it was read).
  uint64_t nodes_inspected = 0;

  // The events this summary decides to be true.
  uint8_t events() const noexcept {
    const int distinct_accelerators =
        has_other_accelerator ? 2 : (has_accelerator ? 1 : 0);
    return backward_device_events(distinct_accelerators, has_cpu_node);
  }

  // Folds a node routed as `route` into the summary; returns whether the
  // summary changed. Almost every node changes nothing: a CPU node after the
  // first, the first accelerator again.
  bool add_route(NodeRoute route) noexcept {
    switch (route.queue) {
      case NodeQueue::kNone:
        return false;
      case NodeQueue::kCpu:
        if (has_cpu_node) {
          return false;
        }
        has_cpu_node = true;
        return true;
      case NodeQueue::kAccelerator:
        if (!has_accelerator) {
          first_accelerator = route.device;
          has_accelerator = true;
          return true;
        }
        if (has_other_accelerator || route.device == first_accelerator) {
          return false;
        }
        has_other_accelerator = true;
        return true;
    }
    return false;
  }
};

// Note [Keeping the per-node cost of classification low]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Until its events fired, the classifier reads every node of every pass whose
// question stays open (any CPU-only pass in a process with an accelerator,
// for the multi-device question; every pass of a one-GPU-per-process job), so
// its per-node cost is paid on each backward. Almost every node repeats what
// the summary already holds, so the loop keeps its counters in locals and
// re-evaluates the decision only when a node changes the summary. The root is
// read first and not looked for in `nodes`: a root that also appears there is
// read twice, which changes no decision (folding is idempotent), only
// nodes_inspected; the engine's walk never puts the root into
// nodes_in_graph_.
//
// Note [The settled-device fast path]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Most nodes take one gradient, and its device is one the summary already
// holds: the CPU once a CPU node was seen, the first accelerator once it was
// seen. Such a node cannot change the summary, so the loop compares the
// node's one input device, read as two bytes (type and index), with the
// devices of nodes already folded whose device alone decided their route
// (SettledDevices), and moves on when either matches. Any other node (no
// input or several, Meta and Lazy, a CPU device of another index, a new
// accelerator) is folded by fold_node_slow(), out of line so that the loop
// keeps its values in registers, which also records the settled devices.
// Folding is idempotent, so skipping a node that would not change the
// summary changes no decision. The loop keeps no per-node counter: a pass
// read to its end read nodes.size() nodes, and one that stopped early (only
// when its events are about to fire) counts its nodes once, from the start.
//
// What is left per node, from the disassembly (x86-64, GCC 12, -O2): the
// next link of the hash set's list and its test (3 instructions), the node
// pointer (1), num_inputs compared with 1 (2), the metadata array and the
// input's device (2), and one compare and branch per settled device tried
// (2 each): 10 instructions for a node on the device compared first (GCC
// puts the CPU there), 12 for one on the accelerator. A partial pass adds
// topological_nr(), which is a load, a compare and the store of has_parent_
// that this accessor does, and a counter of the nodes it skips.

namespace detail {

// A c10::Device as one 16-bit value (type in the low byte, index in the
// high one), for one compare per node; kNoDeviceKey matches no device.
inline uint16_t device_key(c10::Device device) noexcept {
  return static_cast<uint16_t>(
      static_cast<uint8_t>(device.type()) |
      (static_cast<uint16_t>(static_cast<uint8_t>(device.index())) << 8));
}
constexpr uint16_t kNoDeviceKey = 0xffff;

// The settled devices of Note [The settled-device fast path].
struct SettledDevices {
  uint16_t cpu = kNoDeviceKey;
  uint16_t accelerator = kNoDeviceKey;
};

// What folding one node off the fast path leaves: the settled devices, and
// whether every wanted event is now decided. Small enough for one register.
struct SlowFold {
  SettledDevices settled;
  bool decided;
};

// Folds a node that the fast path could not skip into `summary`. Kept out of
// line, so that the loop around the fast path keeps its values in registers.
C10_NOINLINE inline SlowFold fold_node_slow(
    PassDeviceSummary& summary,
    SettledDevices settled,
    const Node& node,
    uint8_t wanted) noexcept {
  NodeRoute route{NodeQueue::kNone};
  if (node.num_inputs() == 1) {
    const c10::Device device = input_device(node, 0);
    if (device.type() == c10::DeviceType::CPU) {
      settled.cpu = device_key(device); // add_route() below records it
    }
    route = route_of_input(device); // its only input routes it
  } else {
    route = route_of(node);
  }
  const bool changed = summary.add_route(route);
  if (summary.has_accelerator) {
    settled.accelerator = device_key(summary.first_accelerator);
  }
  return {settled, changed && (summary.events() & wanted) == wanted};
}

// Note [Folding the root inline]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every pass folds its root, and a root almost always takes one gradient.
// Into an empty summary, such a node's fold is a few stores, which
// fold_root() does inline: the call to fold_node_slow() and its bookkeeping
// were a fixed part of what every pass pays whatever its size. A root with
// no input or several goes the general way.

// Folds the root, the first node of every pass, into the empty `summary`.
C10_ALWAYS_INLINE SettledDevices fold_root(
    PassDeviceSummary& summary,
    const Node& root,
    uint8_t wanted) noexcept {
  if (root.num_inputs() != 1) {
    return fold_node_slow(summary, SettledDevices{}, root, wanted).settled;
  }
  const c10::Device device = input_device(root, 0);
  SettledDevices settled;
  if (runs_on_cpu_ready_queue(device.type())) {
    summary.has_cpu_node = true;
    if (device.type() == c10::DeviceType::CPU) {
      settled.cpu = device_key(device);
    }
  } else {
    summary.first_accelerator = device;
    summary.has_accelerator = true;
    settled.accelerator = device_key(device);
  }
  return settled;
}

// The fast path: a node whose one input is on a settled device changes
// nothing.
C10_ALWAYS_INLINE bool is_settled(
    const Node& node,
    SettledDevices settled) noexcept {
  if (node.num_inputs() != 1) {
    return false;
  }
  const uint16_t key = device_key(input_device(node, 0));
  return key == settled.cpu || key == settled.accelerator;
}

// Folds `root` and the nodes of `nodes` that belong to the pass into
// `summary` until every event in `wanted` is decided; returns how many nodes
// it read (Note [The settled-device fast path]).
template <bool kSkipBelowMinTopoNr, typename NodeRange>
C10_ALWAYS_INLINE uint64_t fold_pass_nodes(
    PassDeviceSummary& summary,
    const Node* root,
    const NodeRange& nodes,
    uint8_t wanted,
    uint64_t min_topo_nr) noexcept {
  SettledDevices settled;
  const uint64_t root_read = root != nullptr ? 1 : 0;
  // One node routes to one queue, so the root alone decides no event.
  if (root != nullptr) {
    settled = fold_root(summary, *root, wanted);
  }
  uint64_t skipped = 0;
  const auto begin = nodes.begin();
  const auto end = nodes.end();
  for (auto it = begin; it != end; ++it) {
    const Node* node = *it;
    if constexpr (kSkipBelowMinTopoNr) {
      if (node->topological_nr() < min_topo_nr) {
        ++skipped;
        continue;
      }
    }
    if (is_settled(*node, settled)) {
      continue;
    }
    const SlowFold folded = fold_node_slow(summary, settled, *node, wanted);
    settled = folded.settled;
    if (folded.decided) {
      // Stopping early happens about once per event per process: counting
      // the nodes read walks them again.
      uint64_t read = root_read + 1;
      for (auto counted = begin; counted != it; ++counted) {
        if constexpr (kSkipBelowMinTopoNr) {
          read += (*counted)->topological_nr() >= min_topo_nr;
        } else {
          ++read;
        }
      }
      return read;
    }
  }
  return root_read + static_cast<uint64_t>(nodes.size()) - skipped;
}

} // namespace detail

// Classifies one backward pass: `root` plus every node in `nodes` (the set the
// dependency walk visited) whose topological_nr is at least `min_topo_nr`
// (Note [Nodes below min_topo_nr are not part of the pass]). Only the events
// in `wanted` matter: reading stops as soon as every one of them is decided
// to be true. Whether an event holds never depends on the order of `nodes`;
// only how many nodes were read before stopping does.
template <typename NodeRange>
C10_ALWAYS_INLINE PassDeviceSummary classify_backward_pass(
    const Node* root,
    const NodeRange& nodes,
    uint8_t wanted,
    uint64_t min_topo_nr = 0) noexcept {
  PassDeviceSummary summary;
  wanted &= kAllBackwardDeviceEvents;
  if (wanted == kNoBackwardDeviceEvent) {
    return summary;
  }
  summary.nodes_inspected = min_topo_nr == 0
      ? detail::fold_pass_nodes<false>(summary, root, nodes, wanted, 0)
      : detail::fold_pass_nodes<true>(
            summary, root, nodes, wanted, min_topo_nr);
  return summary;
}

// Device classes of a backward pass, for the opt-in per-pass statistics.
enum class BackwardDeviceClass : uint8_t {
  kCpuOnly = 0,           // no node routed to an accelerator
  kSingleAccelerator = 1, // one accelerator device, no CPU-routed node
  kAcceleratorCpu = 2,    // one accelerator device and CPU-routed nodes
  kMultiAccelerator = 3,  // two or more accelerator devices (CPU or not)
};
constexpr int kNumBackwardDeviceClasses = 4;

// Everything the statistics want from one pass: the distinct accelerator
// devices (counted exactly up to kMaxCountedAccelerators, a fixed array, so
// no allocation) and whether a CPU-routed node occurs. Reads every node.
struct PassDeviceCensus {
  static constexpr int kMaxCountedAccelerators = 16;
  // (type, index) of each distinct accelerator seen, packed into 16 bits.
  std::array<uint16_t, kMaxCountedAccelerators> accelerators{};
  // Distinct accelerator devices seen, saturating at kMaxCountedAccelerators.
  int num_accelerators = 0;
  bool has_cpu_node = false;
  uint64_t nodes_inspected = 0;

  void add(const Node& node) noexcept {
    ++nodes_inspected;
    const NodeRoute route = route_of(node);
    if (route.queue == NodeQueue::kNone) {
      return;
    }
    if (route.queue == NodeQueue::kCpu) {
      has_cpu_node = true;
      return;
    }
    const uint16_t key = static_cast<uint16_t>(
        (static_cast<uint16_t>(route.device.type()) << 8) |
        static_cast<uint8_t>(route.device.index()));
    for (int i = 0; i < num_accelerators; ++i) {
      if (accelerators[i] == key) {
        return;
      }
    }
    if (num_accelerators < kMaxCountedAccelerators) {
      accelerators[num_accelerators++] = key;
    }
  }

  BackwardDeviceClass device_class() const noexcept {
    if (num_accelerators >= 2) {
      return BackwardDeviceClass::kMultiAccelerator;
    }
    if (num_accelerators == 1) {
      return has_cpu_node ? BackwardDeviceClass::kAcceleratorCpu
                          : BackwardDeviceClass::kSingleAccelerator;
    }
    return BackwardDeviceClass::kCpuOnly;
  }

  uint8_t events() const noexcept {
    return backward_device_events(num_accelerators, has_cpu_node);
  }
};

// The census of a whole pass: root plus the nodes of `nodes` at or above
// `min_topo_nr` (Note [Nodes below min_topo_nr are not part of the pass]),
// root read once.
template <typename NodeRange>
PassDeviceCensus census_backward_pass(
    const Node* root,
    const NodeRange& nodes,
    uint64_t min_topo_nr = 0) noexcept {
  PassDeviceCensus census;
  if (root != nullptr) {
    census.add(*root);
  }
  for (const Node* node : nodes) {
    if (node != root &&
        (min_topo_nr == 0 || node->topological_nr() >= min_topo_nr)) {
      census.add(*node);
    }
  }
  return census;
}

} // namespace torch::autograd::device_logging
