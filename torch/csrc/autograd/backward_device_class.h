#pragma once

// What a backward pass's devices make it: the two API-usage events, the four
// device classes of the statistics, and a pass's census. The classifier that
// reads the nodes is backward_device_classifier.h.
//
// Note [Which files include libtorch's graph headers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// <torch/csrc/autograd/function.h> brings in most of ATen's headers, and a
// source file that includes it takes several times as long to compile as one
// that does not. Only the files that read a graph include it (the engine seam,
// pass_logging.cpp and interposition.cpp, through the classifier); this
// header needs only c10's Device, so that the files that only name a pass's
// events, classes or census (the statistics, the census on request, the
// record, the C API) stay cheap to compile, in every build of the library
// and in each test run's pip builds.

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>

#include <array>
#include <cstdint>

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
// The one definition of both events, which every classifier asks: a
// pass whose nodes are routed to `distinct_accelerators` distinct accelerator
// devices (any count of 2 or more decides the same) and, if
// `has_cpu_node`, also to the CPU ready queue.
constexpr uint8_t backward_device_events(
    int distinct_accelerators,
    bool has_cpu_node) noexcept {
  return (distinct_accelerators >= 2 ? kMultiDeviceBackward : 0) |
      (distinct_accelerators >= 1 && has_cpu_node ? kGpuCpuBackward : 0);
}

// True for device types whose nodes the engine runs on the CPU ready queue
// (Note [Where the engine runs a node] in backward_device_classifier.h).
constexpr bool runs_on_cpu_ready_queue(c10::DeviceType type) noexcept {
  return type == c10::DeviceType::CPU || type == c10::DeviceType::Meta ||
      type == c10::DeviceType::Lazy;
}

// Device classes of a backward pass, for the opt-in per-pass statistics.
enum class BackwardDeviceClass : uint8_t {
  kCpuOnly = 0,           // no node routed to an accelerator
  kSingleAccelerator = 1, // one accelerator device, no CPU-routed node
  kAcceleratorCpu = 2,    // one accelerator device and CPU-routed nodes
  kMultiAccelerator = 3,  // two or more accelerator devices (CPU or not)
};
constexpr int kNumBackwardDeviceClasses = 4;

// Note [One spelling of the classes and events]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The names that leave the library (the record's `pass_classes` keys and
// `events`, the Prometheus `class` and `event` labels, the C API's strings)
// are spelled here, once for C++, and in
// python/autograd_device_logging/vocabulary.py, once for Python;
// test/test_record_vocabulary.py holds the two, and the record's schema, to
// each other. Every encoder and the C API take them from here.
constexpr std::array<const char*, kNumBackwardDeviceClasses>
    kBackwardDeviceClassNames = {
        "cpu_only",
        "single_accelerator",
        "accelerator_cpu",
        "multi_accelerator"};

// The two events, by bit (kMultiDeviceBackward, kGpuCpuBackward), in that
// order.
constexpr int kNumBackwardDeviceEvents = 2;
constexpr std::array<BackwardDeviceEvent, kNumBackwardDeviceEvents>
    kBackwardDeviceEventBits = {kMultiDeviceBackward, kGpuCpuBackward};
constexpr std::array<const char*, kNumBackwardDeviceEvents>
    kBackwardDeviceEventNames = {
        kMultiDeviceBackwardEventName,
        kGpuCpuBackwardEventName};

// Everything the statistics want from one pass: the distinct accelerator
// devices (counted exactly up to kMaxCountedAccelerators, a fixed array, so
// no allocation) and whether a CPU-routed node occurs; census_backward_pass
// (backward_device_classifier.h) reads every node of a pass into it.
struct PassDeviceCensus {
  static constexpr int kMaxCountedAccelerators = 16;
  // (type, index) of each distinct accelerator seen, packed into 16 bits.
  std::array<uint16_t, kMaxCountedAccelerators> accelerators{};
  // Distinct accelerator devices seen, saturating at kMaxCountedAccelerators.
  int num_accelerators = 0;
  bool has_cpu_node = false;
  uint64_t nodes_inspected = 0;

  // Counts `device`, an accelerator device a node is routed to, once
  // (add_to_census in backward_device_classifier.h reads the nodes).
  void add_accelerator(c10::Device device) noexcept {
    const uint16_t key = static_cast<uint16_t>(
        (static_cast<uint16_t>(device.type()) << 8) |
        static_cast<uint8_t>(device.index()));
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

} // namespace torch::autograd::device_logging
