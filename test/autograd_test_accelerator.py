"""Loads the two-device test accelerator ("testaccel") into this process.

The C++ backend (test/cpp/test_accelerator) is built by CMake into
<build>/test/libautograd_test_accelerator.so. Loading it registers the
PrivateUse1 backend under the name "testaccel"; this module adds the Python
device module PyTorch expects for a renamed backend (torch.testaccel).
"""

import os
import types

import torch

BUILD_DIR = os.environ.get(
    "AUTOGRAD_DEVICE_LOGGING_BUILD_DIR",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build"),
)
LIBRARY = os.path.join(BUILD_DIR, "test", "libautograd_test_accelerator.so")
DEVICE_COUNT = 2


def load():
    """Registers testaccel; returns its two devices."""
    if not hasattr(torch, "testaccel"):
        torch.ops.load_library(LIBRARY)
        module = types.ModuleType("testaccel")
        module.is_available = lambda: True
        module.device_count = lambda: DEVICE_COUNT
        module.current_device = lambda: 0
        module._is_in_bad_fork = lambda: False
        module.manual_seed_all = lambda seed: None
        module.get_amp_supported_dtype = lambda: [torch.float16, torch.bfloat16]
        module.is_autocast_enabled = lambda: False
        torch._register_device_module("testaccel", module)
    return torch.device("testaccel", 0), torch.device("testaccel", 1)
