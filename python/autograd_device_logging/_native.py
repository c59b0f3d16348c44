"""The one boundary between Python and libautograd_device_logging.so: where
the library's file is, how it is loaded, and the ctypes table of its C ABI.

The table is the only description of the C functions on the Python side, and
test/test_c_api.py holds it to their declarations in
torch/csrc/autograd/device_logging_c_api.h: the same names, and the same
argument and return types. Nothing here runs at import: load() is called by
_activation.py, at the moment Note [Activation] gives.
"""

from __future__ import annotations

import ctypes
import os
from typing import Dict, List, Optional, Tuple

LIBRARY_NAME = "libautograd_device_logging.so"
#: Every C function's name starts with it.
PREFIX = "autograd_device_logging_"

_u64 = ctypes.c_uint64

#: C function (without PREFIX) -> (return type, argument types), in the
#: order of device_logging_c_api.h. None as a return type is void.
SIGNATURES: Dict[str, Tuple[Optional[type], List[type]]] = {
    # Status (DeviceLoggingStatus).
    "active": (ctypes.c_int, []),
    "events_raised": (ctypes.c_uint, []),
    "nodes_inspected": (_u64, []),
    "disabled_reason": (ctypes.c_char_p, []),
    "built_for_torch": (ctypes.c_char_p, []),
    "running_torch": (ctypes.c_char_p, []),
    "torch_logs_events": (ctypes.c_int, []),
    "library_path": (ctypes.c_char_p, []),
    "loaded_by_preload": (ctypes.c_int, []),
    # Single-device passes on the calling thread.
    "set_calling_thread": (ctypes.c_int, [ctypes.c_int]),
    "calling_thread": (ctypes.c_int, []),
    # Statistics.
    "stats": (ctypes.c_int, [ctypes.POINTER(_u64)]),
    "enable_stats": (None, [ctypes.c_int]),
    "reset_stats": (None, []),
    # The per-process record.
    "set_report_dir": (None, [ctypes.c_char_p]),
    "set_record_program": (None, [ctypes.c_char_p]),
    "set_record_activation": (None, [ctypes.c_char_p]),
    "start_recording_threading_cost": (
        None,
        [ctypes.c_double, _u64, _u64, _u64, ctypes.c_int64, ctypes.c_int],
    ),
    "record_measured_pair": (ctypes.c_int, [ctypes.c_int, _u64, _u64]),
    "record_measurement_count": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, _u64]),
    "job_wide_name": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
    "process_role": (ctypes.c_char_p, []),
    "write_process_record": (ctypes.c_int, []),
    "record_json": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "wait_for_record_write": (_u64, [_u64, ctypes.c_int]),
    "followed_record_json": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]),
    # Around a sampled pass.
    "multithreading_enabled": (ctypes.c_int, []),
    "set_multithreading_enabled": (ctypes.c_int, [ctypes.c_int]),
    "request_pass_census": (ctypes.c_int, []),
    "take_pass_census": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(_u64)]),
    # Test seams.
    "inject_classifier_fault_for_testing": (ctypes.c_int, [ctypes.c_int]),
    "reset_raised_events_for_testing": (None, [ctypes.c_uint]),
}


def library_path(override: Optional[str] = None) -> str:
    """Path of the library the package loads: `override` (the settings'
    AUTOGRAD_DEVICE_LOGGING_LIBRARY), else the copy installed next to the
    package."""
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Gives every C function of `lib` its signature from SIGNATURES. Raises
    AttributeError when the library lacks one."""
    for name, (restype, argtypes) in SIGNATURES.items():
        function = getattr(lib, PREFIX + name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


def already_loaded() -> Optional[ctypes.CDLL]:
    """The library if this process has it already (LD_PRELOAD, or a program
    or extension linked with it), found by its soname: loading the package's
    copy as well would put a second definition behind the first."""
    try:
        return ctypes.CDLL(LIBRARY_NAME, mode=os.RTLD_GLOBAL | os.RTLD_NOW | os.RTLD_NOLOAD)
    except OSError:
        return None


# Note [Loaded into the global scope]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The library is loaded with RTLD_GLOBAL, as LD_PRELOAD and a program linked
# with it would have it: the interposition then rests on one rule for every
# way the library comes in (the global lookup order, which its load-time
# check reads with dlsym(RTLD_DEFAULT)). RTLD_LOCAL would also bind libtorch
# to it here, but only because libtorch_cpu, loaded as the library's own
# dependency, is relocated in the local scope of that dlopen: a subtler rule,
# which no release in the matrix has been run under. The global scope is safe
# now that the library exports its API and nothing else (Note [The library
# exports its API and nothing else], cmake/library_linking.cmake): it adds
# Engine::compute_dependencies, which it means to, and names of its own that
# nothing else defines. Before that, a static-libstdc++ build loaded this way
# put its copy of the C++ runtime ahead of the process's, and crashed
# `import torch` after numpy.
def load(path: str) -> Tuple[ctypes.CDLL, Optional[str]]:
    """The library, declared, and how it came in when it was in the process
    already ("by preload" or "linked"; None when this call loaded it).
    Raises OSError or AttributeError when it cannot be loaded."""
    lib = already_loaded()
    if lib is None:
        return declare(ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW)), None
    declare(lib)
    return lib, "by preload" if lib.autograd_device_logging_loaded_by_preload() else "linked"


def decode(value: Optional[bytes]) -> Optional[str]:
    return None if value is None else value.decode("utf-8", "replace")
