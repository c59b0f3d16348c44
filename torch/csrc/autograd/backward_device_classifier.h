#pragma once

// The device-set classifier of the autograd device-logging patch: pure
// functions over autograd Nodes, with no global state, so that they can be
// unit-tested on hand-made graphs without an engine.

#include <torch/csrc/autograd/backward_device_class.h>
#include <torch/csrc/autograd/function.h>

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/macros/Macros.h>

#include <array>
#include <cstdint>
#include <optional>

namespace torch::autograd::device_logging {

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

// What a backward pass's nodes have shown so far, as far as it matters to
// the events wanted (a classifier may skip nodes that cannot change those;
// its events() are exact only under that mask). Holds no container: two
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
// (2 each): 10 instructions for a node on the device compared first (in
// the settled prefix of a full pass GCC puts the root's device there), 12
// for one on the other. A partial pass adds
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

// Note [A pass that stays on its root's device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In a process with an accelerator, almost every pass until the events fired
// stays on one device (the CPU-only passes that keep the multi-device
// question open, every pass of a one-GPU-per-process job): after its root,
// every node is settled, and the root alone decides no event. So a pass is
// read in two parts. read_settled_prefix() needs no summary: a node whose
// one input is on the root's device is routed as the root is, so it takes
// the root's device as settled and skips nodes until one is not settled. It
// calls nothing, so its values stay in caller-saved registers, and a caller
// that finds the whole pass settled is done, with no stack frame, no summary
// in memory and no decision to make (Note [The per-pass fast path]). Only at
// the first node that is not settled does classify_after_prefix() take over,
// out of the hot path: it folds the root and then reads on from that node,
// folding as before. A root that does not take exactly one gradient leaves
// the prefix empty.
//
// Before this split the hot loop shared a function with the out-of-line
// folds, so every pass paid for that function's frame and for a summary kept
// in memory, which was most of its per-pass constant (docs/performance.md
// has the figures).
//
// Once the GPU-CPU event fired, a node on the CPU can no longer change an
// event that is still wanted, so the CPU counts as settled from the start:
// a one-accelerator pass with CPU leaves then stays in the first part too.

// The devices settled before any node is read: the CPU (as CPU tensors name
// it, with no index) when no wanted event depends on CPU-routed nodes.
inline SettledDevices settled_before_reading(uint8_t wanted) noexcept {
  SettledDevices settled;
  if (!(wanted & kGpuCpuBackward)) {
    settled.cpu = device_key(c10::Device(c10::DeviceType::CPU));
  }
  return settled;
}

// How far read_settled_prefix() got. With `whole_pass`, every node was
// settled, so the pass's summary is its root's alone; otherwise `stop` is
// the first node not known to be settled (the range's begin for a root that
// does not take exactly one gradient). `skipped` counts the nodes below
// min_topo_nr passed before `stop`.
template <typename NodeIterator>
struct SettledPrefix {
  SettledDevices settled;
  NodeIterator stop;
  uint64_t skipped = 0;
  bool whole_pass = false;
};

// Takes the device of `root` as settled and skips the nodes of `nodes` that
// cannot change the summary (Note [A pass that stays on its root's device]).
template <bool kSkipBelowMinTopoNr, typename NodeRange>
C10_ALWAYS_INLINE SettledPrefix<typename NodeRange::const_iterator>
read_settled_prefix(
    const Node* root,
    const NodeRange& nodes,
    uint8_t wanted,
    uint64_t min_topo_nr) noexcept {
  SettledPrefix<typename NodeRange::const_iterator> prefix;
  prefix.settled = settled_before_reading(wanted);
  auto it = nodes.begin();
  if (root != nullptr) {
    if (root->num_inputs() != 1) {
      prefix.stop = it;
      return prefix;
    }
    // The root's device, whatever its type, in the accelerator's slot (a
    // CPU root then fills both slots' roles; either match skips the node).
    prefix.settled.accelerator = device_key(input_device(*root, 0));
  }
  const auto end = nodes.end();
  for (; it != end; ++it) {
    const Node* node = *it;
    if constexpr (kSkipBelowMinTopoNr) {
      if (node->topological_nr() < min_topo_nr) {
        ++prefix.skipped;
        continue;
      }
    }
    if (!is_settled(*node, prefix.settled)) {
      break;
    }
  }
  prefix.stop = it;
  prefix.whole_pass = it == end;
  return prefix;
}

// The nodes a pass read to its end reads: the root and every node of
// `nodes` at or above min_topo_nr.
template <typename NodeRange>
C10_ALWAYS_INLINE uint64_t nodes_in_pass(
    const Node* root,
    const NodeRange& nodes,
    uint64_t skipped) noexcept {
  return (root != nullptr ? 1 : 0) + static_cast<uint64_t>(nodes.size()) -
      skipped;
}

// Classifies the pass whose settled prefix ends at `stop`, a node that is
// not settled: folds `root`, then every node from `stop` on until
// every event in `wanted` is decided. `skipped` is the prefix's count of
// nodes below min_topo_nr.
template <bool kSkipBelowMinTopoNr, typename NodeRange>
PassDeviceSummary classify_after_prefix(
    const Node* root,
    const NodeRange& nodes,
    typename NodeRange::const_iterator stop,
    uint64_t skipped,
    uint8_t wanted,
    uint64_t min_topo_nr) noexcept {
  PassDeviceSummary summary;
  SettledDevices settled = settled_before_reading(wanted);
  if (root != nullptr) {
    settled = fold_node_slow(summary, settled, *root, wanted).settled;
  }
  const auto begin = nodes.begin();
  const auto end = nodes.end();
  for (auto it = stop; it != end; ++it) {
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
      uint64_t read = (root != nullptr ? 1 : 0) + 1;
      for (auto counted = begin; counted != it; ++counted) {
        if constexpr (kSkipBelowMinTopoNr) {
          read += (*counted)->topological_nr() >= min_topo_nr;
        } else {
          ++read;
        }
      }
      summary.nodes_inspected = read;
      return summary;
    }
  }
  summary.nodes_inspected = nodes_in_pass(root, nodes, skipped);
  return summary;
}

// Folds `root` and the nodes of `nodes` that belong to the pass into an
// empty summary until every event in `wanted` is decided; the summary
// counts the nodes read (Note [The settled-device fast path]).
template <bool kSkipBelowMinTopoNr, typename NodeRange>
C10_ALWAYS_INLINE PassDeviceSummary fold_pass_nodes(
    const Node* root,
    const NodeRange& nodes,
    uint8_t wanted,
    uint64_t min_topo_nr) noexcept {
  const auto prefix = read_settled_prefix<kSkipBelowMinTopoNr>(
      root, nodes, wanted, min_topo_nr);
  if (!prefix.whole_pass) {
    return classify_after_prefix<kSkipBelowMinTopoNr>(
        root, nodes, prefix.stop, prefix.skipped, wanted, min_topo_nr);
  }
  PassDeviceSummary summary;
  if (root != nullptr) {
    fold_node_slow(summary, SettledDevices{}, *root, wanted);
  }
  summary.nodes_inspected = nodes_in_pass(root, nodes, prefix.skipped);
  return summary;
}

} // namespace detail

// Note [Nodes below min_topo_nr are not part of the pass]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With inputs given (torch.autograd.grad, backward(inputs=...)), the engine
// passes compute_dependencies the smallest topological_nr of the inputs'
// gradient edges as min_topo_nr. A node below it cannot lie on a path to any
// input, so the pass never runs it. libtorch's walk still puts it into
// nodes_in_graph_ when a node it expands points to it, and then does not
// expand it, so the set can hold such nodes. The classifier reads only the
// nodes at or above min_topo_nr (min_topo_nr 0 is every node): a partial pass
// is classified by the nodes it can run, and upstream's own events on such
// passes agree (test_upstream_parity.py replays grad on partial graphs).

// Classifies one backward pass: `root` plus every node in `nodes` (the set the
// dependency walk visited) whose topological_nr is at least `min_topo_nr`
// (Note [Nodes below min_topo_nr are not part of the pass]). Only the events
// in `wanted` matter: reading stops as soon as every one of them is decided
// to be true, and the result's events() are exact under `wanted` only.
// Whether an event holds never depends on the order of `nodes`; only how many
// nodes were read before stopping does.
template <typename NodeRange>
C10_ALWAYS_INLINE PassDeviceSummary classify_backward_pass(
    const Node* root,
    const NodeRange& nodes,
    uint8_t wanted,
    uint64_t min_topo_nr = 0) noexcept {
  wanted &= kAllBackwardDeviceEvents;
  if (wanted == kNoBackwardDeviceEvent) {
    return PassDeviceSummary{};
  }
  return min_topo_nr == 0
      ? detail::fold_pass_nodes<false>(root, nodes, wanted, 0)
      : detail::fold_pass_nodes<true>(root, nodes, wanted, min_topo_nr);
}

// Adds one node to a pass's census: where the engine would run it (Note
// [Where the engine runs a node]).
inline void add_to_census(PassDeviceCensus& census, const Node& node) noexcept {
  ++census.nodes_inspected;
  const NodeRoute route = route_of(node);
  if (route.queue == NodeQueue::kCpu) {
    census.has_cpu_node = true;
  } else if (route.queue == NodeQueue::kAccelerator) {
    census.add_accelerator(route.device);
  }
}

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
    add_to_census(census, *root);
  }
  for (const Node* node : nodes) {
    if (node != root &&
        (min_topo_nr == 0 || node->topological_nr() >= min_topo_nr)) {
      add_to_census(census, *node);
    }
  }
  return census;
}

} // namespace torch::autograd::device_logging
