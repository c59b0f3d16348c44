#pragma once

// The autograd device-logging patch's additions to the engine header. The
// engine itself is the installed libtorch's: this header pulls in the
// installed engine.h (next in the include path), then the patch's own
// headers that the patched Engine::compute_dependencies (engine.cpp) calls:
// - interposition.h: libtorch's definition, which it forwards to;
// - device_logging_state.h: the state word it reads after the walk;
// - pass_logging.h: the per-pass classification it hands over to.
#include_next <torch/csrc/autograd/engine.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/interposition.h>
#include <torch/csrc/autograd/pass_logging.h>
