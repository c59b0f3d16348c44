"""Autograd device logging for an installed PyTorch.

Importing this package before ``torch`` loads ``libautograd_device_logging.so``
into the global symbol scope, so that libtorch binds its patched
``Engine::compute_dependencies``. From then on every backward pass is
classified by the devices it spans, and PyTorch's once-per-process API-usage
events ``torch.autograd.multidevice_backward`` and
``torch.autograd.gpu_cpu_backward`` are emitted (``PYTORCH_API_USAGE_STDERR=1``
prints them).

``python -m autograd_device_logging script.py args...`` runs a script with the
library active; ``python -m autograd_device_logging --check`` reports whether
it is.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import os
import sys
import warnings
from typing import FrozenSet, Optional

from autograd_device_logging import threading_measurement as _measurement
from autograd_device_logging.threading_measurement import ThreadingCost

__version__ = "0.1.0"

__all__ = [
    "Status",
    "library_path",
    "status",
    "is_active",
    "check_report",
    "DeviceStats",
    "device_stats",
    "enable_device_stats",
    "reset_device_stats",
    "gather_device_stats",
    "format_device_stats_table",
    "write_process_record",
    "measure_threading",
    "threading_cost",
    "ThreadingCost",
]

_LIBRARY_NAME = "libautograd_device_logging.so"
_LIBRARY_ENV = "AUTOGRAD_DEVICE_LOGGING_LIBRARY"
_EVENT_NAMES = {
    1: "torch.autograd.multidevice_backward",
    2: "torch.autograd.gpu_cpu_backward",
}


def library_path() -> str:
    """Path of the library this package loads ($AUTOGRAD_DEVICE_LOGGING_LIBRARY
    overrides the copy installed next to the package)."""
    override = os.environ.get(_LIBRARY_ENV)
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME)


def _already_loaded() -> Optional[ctypes.CDLL]:
    """The library if this process has it already (LD_PRELOAD, or a program
    or extension linked with it), found by its soname: loading the package's
    copy as well would put a second definition behind the first."""
    try:
        return ctypes.CDLL(_LIBRARY_NAME, mode=os.RTLD_GLOBAL | os.RTLD_NOW | os.RTLD_NOLOAD)
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
def _load(path: str) -> ctypes.CDLL:
    global _activation
    lib = _already_loaded()
    if lib is None:
        lib = ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
        _activation = "by import"
    else:
        lib.autograd_device_logging_loaded_by_preload.restype = ctypes.c_int
        _activation = "by preload" if lib.autograd_device_logging_loaded_by_preload() else "linked"
    lib.autograd_device_logging_library_path.restype = ctypes.c_char_p
    for name in ("set_report_dir", "set_record_program", "set_record_activation"):
        getattr(lib, "autograd_device_logging_" + name).argtypes = [ctypes.c_char_p]
    lib.autograd_device_logging_hook_has_run.restype = ctypes.c_int
    lib.autograd_device_logging_torch_logs_events.restype = ctypes.c_int
    lib.autograd_device_logging_events_emitted.restype = ctypes.c_uint
    lib.autograd_device_logging_nodes_inspected.restype = ctypes.c_uint64
    for name in ("disabled_reason", "built_for_torch", "running_torch"):
        getattr(lib, "autograd_device_logging_" + name).restype = ctypes.c_char_p
    lib.autograd_device_logging_stats.restype = ctypes.c_int
    lib.autograd_device_logging_stats.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.autograd_device_logging_enable_stats.argtypes = [ctypes.c_int]
    _measurement.declare(lib)
    return lib


def _load_or_warn(path: str):
    """The loaded library, or None with one warning naming the path, the
    cause and the fix: a library that cannot be loaded (missing, another
    architecture, not a shared object) must not stop the importing program.
    """
    try:
        return _load(path), None
    except (OSError, AttributeError) as e:  # AttributeError: a symbol is missing
        overridden = os.environ.get(_LIBRARY_ENV)
        fix = (
            f"unset {_LIBRARY_ENV} or point it at a built {_LIBRARY_NAME}"
            if overridden
            else "reinstall autograd_device_logging for this Python and torch"
        )
        reason = f"the library {path} could not be loaded: {e}"
        # One line: attributed to this package, with no source line under it
        # (a warning attributed to the importing line would print that line).
        warnings.warn_explicit(
            f"autograd_device_logging: backward passes are not logged: {reason}. Fix: {fix}.",
            RuntimeWarning,
            filename=__file__,
            lineno=0,
            module=__name__,
        )
        return None, reason


_torch_was_imported_first = "torch" in sys.modules
#: How the library came into this process (Status.activated_by).
_activation = "not loaded"


# Note [The report runs offline]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# `python -m autograd_device_logging report DIR` and the console script
# autograd-device-logging-report read records on any machine with Python:
# they must not load the library (and with it libtorch), arm a record of
# their own in the directory they read, or print a statistics line. Python
# imports this package before it runs either, so the package does not load
# the library when the command line is one of them (sys.orig_argv, Python
# 3.10+; before that, sys.argv, which holds "-m" while -m imports the package).
def _running_the_report() -> bool:
    if os.path.basename(sys.argv[0] if sys.argv else "") == "autograd-device-logging-report":
        return True
    argv = getattr(sys, "orig_argv", None)
    if argv is None:
        return sys.argv[:2] == ["-m", "report"]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[i + 1 : i + 3] == [__name__, "report"]
        if arg in ("-c", "-") or not arg.startswith("-"):
            return False  # the program starts here: not -m
        i += 2 if arg in ("-X", "-W", "--check-hash-based-pycs") else 1
    return False


if _running_the_report():
    _lib, _load_error = None, "not loaded: the fleet report runs without it"
else:
    _lib, _load_error = _load_or_warn(library_path())
#: The program the per-process record names (the launcher's script or module).
_program: Optional[str] = None


def _tell_record() -> None:
    """Gives the library what its per-process record (Note [The per-process
    record]) cannot know from C++: the program and how the library came in."""
    if _lib is not None:
        program = _program or (sys.argv[0] if sys.argv and sys.argv[0] else sys.executable)
        _lib.autograd_device_logging_set_record_program(os.fsencode(program))
        _lib.autograd_device_logging_set_record_activation(_activation.encode())


def _activated(how: str) -> None:
    """Called by the import hook ("on torch import") and the launcher ("by the
    launcher") right after they imported this package: they, not the program,
    loaded the library then."""
    global _activation
    if _activation == "by import":
        _activation = how
        _tell_record()


def _set_report_dir(path: str) -> None:
    """Makes the library write this process's record into `path` at exit
    (as AUTOGRAD_DEVICE_LOGGING_REPORT_DIR at load does)."""
    if _lib is not None:
        _lib.autograd_device_logging_set_report_dir(os.fsencode(path))


def write_process_record() -> bool:
    """Writes this process's record for the fleet report now, if
    AUTOGRAD_DEVICE_LOGGING_REPORT_DIR (or the launcher's --report) named a
    directory, and waits for it: the library's writer thread does the I/O,
    and the wait ends after 2 s (False then, as when the write failed). The
    library also writes it at the process's first backward pass, when an
    event is first raised, and at exit (which a process that leaves through
    os._exit never reaches); each write replaces the process's one record."""
    if _lib is None:
        return False
    _tell_record()
    _write_threading_cost()
    return bool(_lib.autograd_device_logging_write_process_record())


if _lib is not None:
    _tell_record()
    # Python's atexit runs before the library's: sys.argv is final by then,
    # and the measurement's counts are complete.
    atexit.register(_tell_record)


@dataclasses.dataclass(frozen=True)
class Status:
    """What the library has done in this process."""

    #: libtorch's Engine::execute has called the patched compute_dependencies.
    active: bool
    #: Events this library emitted (each at most once per process).
    events_emitted: FrozenSet[str]
    #: Nodes whose metadata the classifier read, summed over all passes.
    nodes_inspected: int
    #: Why the classifier is off (None while it is on).
    disabled_reason: Optional[str]
    #: torch version the library was compiled against, and the running one.
    built_for_torch: str
    running_torch: str
    #: The library's file (the loaded one, when it came in by preload or link).
    library_path: str
    #: How it came into the process: "on torch import" (the import hook that
    #: pip installs), "by import" (the program imported this package), "by
    #: the launcher", "by preload" (LD_PRELOAD), "linked", or "not loaded".
    activated_by: str
    #: Built against a torch that logs both events itself (2.14 and later):
    #: the library classifies every pass as on earlier releases and leaves
    #: the logging to torch; events_emitted then says which events this
    #: process's passes raised (torch logged them).
    torch_logs_events: bool = False
    #: What the threading-cost measurement found (None while it is off):
    #: per device class, the pairs measured and the median difference
    #: between single-threaded and multithreaded backward.
    threading_cost: Optional[ThreadingCost] = None


def _decode(value: Optional[bytes]) -> Optional[str]:
    return None if value is None else value.decode("utf-8", "replace")


def status() -> Status:
    """Reads the library's state without running anything."""
    if _lib is None:
        return Status(False, frozenset(), 0, _load_error, "", "", library_path(), _activation)
    emitted = _lib.autograd_device_logging_events_emitted()
    return Status(
        active=bool(_lib.autograd_device_logging_hook_has_run()),
        events_emitted=frozenset(name for bit, name in _EVENT_NAMES.items() if emitted & bit),
        nodes_inspected=int(_lib.autograd_device_logging_nodes_inspected()),
        disabled_reason=_decode(_lib.autograd_device_logging_disabled_reason()),
        built_for_torch=_decode(_lib.autograd_device_logging_built_for_torch()) or "",
        running_torch=_decode(_lib.autograd_device_logging_running_torch()) or "",
        library_path=_decode(_lib.autograd_device_logging_library_path()) or library_path(),
        activated_by=_activation,
        torch_logs_events=bool(_lib.autograd_device_logging_torch_logs_events()),
        threading_cost=threading_cost(),
    )


def is_active() -> bool:
    """Whether libtorch calls the patched compute_dependencies.

    If no backward pass has run yet, runs one on a one-element CPU tensor
    (which binds libtorch's call the way the first real pass would).
    """
    if _lib is None:
        return False
    if not _lib.autograd_device_logging_hook_has_run():
        import torch

        with torch.enable_grad():
            torch.ones(1, requires_grad=True).sum().backward()
    return bool(_lib.autograd_device_logging_hook_has_run())


@dataclasses.dataclass(frozen=True)
class DeviceStats:
    """Backward passes by the devices they spanned (opt-in, process-wide)."""

    enabled: bool
    cpu_only: int
    single_accelerator: int
    accelerator_cpu: int
    multi_accelerator: int
    #: Most distinct accelerator devices in one pass (saturates at 16).
    max_accelerators_in_one_pass: int

    @property
    def passes(self) -> int:
        return (
            self.cpu_only + self.single_accelerator + self.accelerator_cpu + self.multi_accelerator
        )


def device_stats() -> DeviceStats:
    """The per-pass counters (all zero unless statistics are enabled)."""
    if _lib is None:
        return DeviceStats(False, 0, 0, 0, 0, 0)
    out = (ctypes.c_uint64 * 5)()
    enabled = _lib.autograd_device_logging_stats(out)
    return DeviceStats(bool(enabled), *(int(v) for v in out))


def enable_device_stats(enabled: bool = True) -> None:
    """Turns the per-pass statistics on (as PYTORCH_AUTOGRAD_DEVICE_STATS=1
    does at load) or off. While on, a summary line goes to stderr at exit.
    Does nothing when the library could not be loaded (status() says why)."""
    if _lib is not None:
        _lib.autograd_device_logging_enable_stats(1 if enabled else 0)


def reset_device_stats() -> None:
    if _lib is not None:
        _lib.autograd_device_logging_reset_stats()


def gather_device_stats(group=None):
    """Every rank's DeviceStats, in rank order, on every rank of `group`
    (torch.distributed must be initialized; a collective)."""
    import torch.distributed as dist

    rows = [None] * dist.get_world_size(group)
    dist.all_gather_object(rows, dataclasses.asdict(device_stats()), group=group)
    return [DeviceStats(**row) for row in rows]


def format_device_stats_table(rows) -> str:
    """One table of per-rank DeviceStats (e.g. from gather_device_stats)."""
    columns = (
        "passes",
        "cpu_only",
        "single_accelerator",
        "accelerator_cpu",
        "multi_accelerator",
        "max_accelerators_in_one_pass",
    )
    header = ["rank", *columns]
    body = [[str(rank)] + [str(getattr(row, c)) for c in columns] for rank, row in enumerate(rows)]
    total = ["all"] + [
        (
            str(max(r.max_accelerators_in_one_pass for r in rows))
            if c == "max_accelerators_in_one_pass"
            else str(sum(getattr(r, c) for r in rows))
        )
        for c in columns
    ]
    table = [header, *body, total]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in table
    )


_NOT_ACTIVE_HINT = (
    "Import autograd_device_logging before torch, or run the program with "
    "`python -m autograd_device_logging script.py ...`."
)


def check_report() -> str:
    """A human-readable report: active or not, versions, and why not."""
    active = is_active()
    s = status()
    lines = [
        f"library:          {s.library_path}",
        f"built for torch:  {s.built_for_torch}",
        f"running torch:    {s.running_torch or 'unknown'}",
        f"active:           {'yes' if active and not s.disabled_reason else 'no'}",
        f"activated:        {s.activated_by}",
        f"import hook:      {_import_hook_state()}",
    ]
    if s.disabled_reason:
        lines.append(f"reason:           disabled: {s.disabled_reason}")
    elif not active:
        lines.append(
            "reason:           libtorch's Engine::compute_dependencies was "
            "already bound to its own definition when this library was "
            "loaded (Python binds an extension's symbols as it imports "
            "torch). " + _NOT_ACTIVE_HINT
        )
    lines.append("threading cost:   " + _threading_cost_line(s.threading_cost))
    events = ", ".join(sorted(s.events_emitted)) or "none"
    if s.torch_logs_events:
        lines.append(
            f"events raised:    {events} (logged by torch {s.running_torch or ''} itself, "
            "not by this library)"
        )
    else:
        lines.append("events emitted:   " + events)
    return "\n".join(lines)


def _threading_cost_line(cost: Optional[ThreadingCost]) -> str:
    if cost is None:
        return (
            f"not measured (measure_threading() or {_measurement.ENV}=1 turns it on, "
            "for Python programs; C++ programs are not measured)"
        )
    pairs = ", ".join(f"{c}: {v.pairs}" for c, v in cost.classes.items()) or "none yet"
    return f"measuring (Python's backward and grad; C++ programs are not measured); pairs: {pairs}"


# Note [Measuring from before torch is imported]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The measurement wraps torch.autograd's functions, which exist only once
# torch's module ran. Asked for before that (by the environment, when the
# import hook or the launcher imports this package ahead of torch), a finder
# goes to the front of sys.meta_path: it finds torch as the finders behind
# it would, and has the module install the sampler right after it ran. The
# import hook, which imports this package from inside its own finder, passes
# the lookup on to this finder itself (_torch_spec), since the import system
# has already moved past the front of the list by then.
_sampler: Optional[_measurement.Sampler] = None


class _InstallAfterTorch:
    def __init__(self, settings):
        self.settings = settings

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        _remove_torch_finders()
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        settings = self.settings

        def exec_then_measure(module):
            try:
                exec_module(module)
            finally:
                del loader.exec_module
            _install_sampler(module, settings)

        loader.exec_module = exec_then_measure
        return spec


def _remove_torch_finders() -> None:
    for finder in [f for f in sys.meta_path if isinstance(f, _InstallAfterTorch)]:
        sys.meta_path.remove(finder)


def _torch_spec():
    """For the import hook: the spec of torch from the pending finder, or None."""
    for finder in sys.meta_path:
        if isinstance(finder, _InstallAfterTorch):
            return finder.find_spec("torch")
    return None


def _install_sampler(torch_module, settings) -> None:
    global _sampler
    if _sampler is not None:
        _sampler.uninstall()
    _sampler = _measurement.Sampler(_lib, settings, torch_module)
    _sampler.install()


def measure_threading(enabled: bool = True, **settings) -> None:
    """Measures what single-threaded backward would cost this process
    (Note [Measuring the cost of single-threaded backward],
    threading_measurement.py): pairs of backward passes, one with
    multithreading off and one with it on, per device class. `settings` are
    those of threading_measurement.Settings (rate, warmup, max_pairs, seed).
    Results are in threading_cost(), status() and the per-process record.
    Works before or after `import torch`; enabled=False stops it (what it
    measured is kept in the record)."""
    global _sampler
    if not enabled:
        _remove_torch_finders()
        if _sampler is not None:
            _sampler.uninstall()
        return
    config = _measurement.Settings(**settings)
    if _lib is None:
        return
    _remove_torch_finders()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(getattr(torch, "autograd", None), "grad"):
        _install_sampler(torch, config)
    else:
        sys.meta_path.insert(0, _InstallAfterTorch(config))


def threading_cost() -> Optional[ThreadingCost]:
    """What the measurement found so far; None when it never ran."""
    if _sampler is None:
        return None
    return _sampler.result(enabled=bool(_sampler._originals))


def _write_threading_cost() -> None:
    if _sampler is not None:
        _sampler.write_record()


def _import_hook_state() -> str:
    try:
        import _autograd_device_logging_hook as hook
    except ImportError:
        return "off here: " + _why_the_import_hook_did_not_run()
    if hook.installed():
        return "installed: every process of this environment loads the library at `import torch`"
    return "off here: " + hook.why_not_installed()


def _why_the_import_hook_did_not_run() -> str:
    try:
        import _autograd_device_logging_hook as hook
    except ImportError:
        return (
            "it is not installed: this package was found on PYTHONPATH or in a source "
            "tree, not installed by pip"
        )
    return hook.why_not_installed()


if _lib is not None and _torch_was_imported_first and not is_active():
    warnings.warn(
        "autograd_device_logging was imported after torch: libtorch bound "
        "Engine::compute_dependencies to its own definition when torch was "
        "imported, so backward passes in this process are not logged. "
        + _NOT_ACTIVE_HINT
        + " (The import hook that loads it at `import torch` did not run: "
        + _why_the_import_hook_did_not_run()
        + ".)",
        RuntimeWarning,
        stacklevel=2,
    )


if _lib is not None and not _running_the_report():
    # Before the library's exit write: the measurement's counts are complete.
    atexit.register(_write_threading_cost)
    _measure_settings = _measurement.settings_from_environment(_measurement.warn_once)
    if _measure_settings is not None:
        measure_threading(**dataclasses.asdict(_measure_settings))
