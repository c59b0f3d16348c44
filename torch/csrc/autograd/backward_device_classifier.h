#pragma once

// The device-set classifier of the autograd device-logging patch: pure
// functions over autograd Nodes, with no global state, so that they can be
// unit-tested on hand-made graphs without an engine.

#include <torch/csrc/autograd/function.h>

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>

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

// Where the engine would run `node`: a CPU device for nodes routed to the CPU
// ready queue, the accelerator device otherwise, and nullopt for a node with
// no input metadata (it takes no gradient, so it carries no device signal).
inline std::optional<c10::Device> routed_device(const Node& node) noexcept {
  const uint32_t num_inputs = node.num_inputs();
  if (num_inputs == 0) {
    return std::nullopt;
  }
  for (uint32_t i = 0; i < num_inputs; ++i) {
    // Placeholders for unused inputs are default-constructed metadata whose
    // device is the CPU, so they never win, as undefined gradients never do
    // in the engine's input buffer.
    const c10::Device device = node.input_metadata(i).device();
    if (device.type() != c10::DeviceType::CPU) {
      return runs_on_cpu_ready_queue(device.type())
          ? c10::Device(c10::DeviceType::CPU)
          : device;
    }
  }
  return c10::Device(c10::DeviceType::CPU);
}

// What a backward pass's nodes have shown so far. Holds no container: two
// distinct accelerators already decide "two or more", so the first one seen
// and a flag for any other are all the multi-device question needs.
struct PassDeviceSummary {
  std::optional<c10::Device> first_accelerator;
  bool has_other_accelerator = false;
  bool has_cpu_node = false;
  // Nodes whose metadata was read (the root counts when it was read).
  uint64_t nodes_inspected = 0;

  // The events this summary decides to be true.
  uint8_t events() const noexcept {
    uint8_t events = kNoBackwardDeviceEvent;
    if (has_other_accelerator) {
      events |= kMultiDeviceBackward;
    }
    if (first_accelerator.has_value() && has_cpu_node) {
      events |= kGpuCpuBackward;
    }
    return events;
  }

  // Folds one node into the summary.
  void add(const Node& node) noexcept {
    ++nodes_inspected;
    const std::optional<c10::Device> device = routed_device(node);
    if (!device.has_value()) {
      return;
    }
    if (device->is_cpu()) {
      has_cpu_node = true;
    } else if (!first_accelerator.has_value()) {
      first_accelerator = device;
    } else if (*device != *first_accelerator) {
      has_other_accelerator = true;
    }
  }
};

// Classifies one backward pass: `root` plus every node in `nodes` (the set the
// dependency walk visited; `root` may or may not be in it and is read once).
// Only the events in `wanted` matter: reading stops as soon as every one of
// them is decided to be true. Whether an event holds never depends on the
// order of `nodes`; only how many nodes were read before stopping does.
template <typename NodeRange>
PassDeviceSummary classify_backward_pass(
    const Node* root,
    const NodeRange& nodes,
    uint8_t wanted) noexcept {
  PassDeviceSummary summary;
  wanted &= kAllBackwardDeviceEvents;
  if (wanted == kNoBackwardDeviceEvent) {
    return summary;
  }
  if (root != nullptr) {
    summary.add(*root);
  }
  for (const Node* node : nodes) {
    if ((summary.events() & wanted) == wanted) {
      break;
    }
    if (node != root) {
      summary.add(*node);
    }
  }
  return summary;
}

// Device classes of a backward pass, for the opt-in per-pass statistics.
enum class BackwardDeviceClass : uint8_t {
  kCpuOnly = 0, // no node routed to an accelerator
  kSingleAccelerator = 1, // one accelerator device, no CPU-routed node
  kAcceleratorCpu = 2, // one accelerator device and CPU-routed nodes
  kMultiAccelerator = 3, // two or more accelerator devices (CPU or not)
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
    const std::optional<c10::Device> device = routed_device(node);
    if (!device.has_value()) {
      return;
    }
    if (device->is_cpu()) {
      has_cpu_node = true;
      return;
    }
    const uint16_t key = static_cast<uint16_t>(
        (static_cast<uint16_t>(device->type()) << 8) |
        static_cast<uint8_t>(device->index()));
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
    uint8_t events = kNoBackwardDeviceEvent;
    if (num_accelerators >= 2) {
      events |= kMultiDeviceBackward;
    }
    if (num_accelerators >= 1 && has_cpu_node) {
      events |= kGpuCpuBackward;
    }
    return events;
  }
};

// The census of a whole pass (root plus `nodes`, root read once).
template <typename NodeRange>
PassDeviceCensus census_backward_pass(
    const Node* root,
    const NodeRange& nodes) noexcept {
  PassDeviceCensus census;
  if (root != nullptr) {
    census.add(*root);
  }
  for (const Node* node : nodes) {
    if (node != root) {
      census.add(*node);
    }
  }
  return census;
}

} // namespace torch::autograd::device_logging
