#pragma once

// The per-pass work of the autograd device-logging patch, which the engine
// seam (engine.cpp) calls after libtorch's dependency walk: classify the pass
// and emit the API-usage events it decides (pass_logging.cpp).

#include <torch/csrc/autograd/accelerator_devices.h>
#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>

namespace torch::autograd::device_logging {

// Classifies the pass whose dependencies were just computed (with
// `min_topo_nr`, as the walk got it) and emits the API-usage events it
// decides; with the calling-thread opt-in on, notes whether the pass runs on
// the calling thread (it does when it is single_accelerator: Note
// [Single-device passes on the calling thread]). Never throws and never
// allocates per node.
void log_backward_devices(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr) noexcept;

} // namespace torch::autograd::device_logging
