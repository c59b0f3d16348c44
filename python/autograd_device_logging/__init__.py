"""Autograd device logging for an installed PyTorch.

With libautograd_device_logging.so in the global symbol scope before torch's
extension module binds ``Engine::compute_dependencies``, every backward pass is
classified by the devices it spans, and PyTorch's once-per-process API-usage
events ``torch.autograd.multidevice_backward`` and
``torch.autograd.gpu_cpu_backward`` are emitted (``PYTORCH_API_USAGE_STDERR=1``
prints them). Importing this package before ``torch`` arranges that: the
library is loaded at torch's import (Note [Activation], _activation.py), and a
process that never imports torch never loads it.

``python -m autograd_device_logging script.py args...`` runs a script with the
library active; ``python -m autograd_device_logging --check`` reports whether
it is.
"""

from __future__ import annotations

import ctypes
import dataclasses
import warnings
from typing import FrozenSet, Optional

from autograd_device_logging import _activation, _native, settings
from autograd_device_logging import threading_measurement as _measurement
from autograd_device_logging import vocabulary
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
    "set_calling_thread_backward",
    "threading_cost",
    "ThreadingCost",
]


def library_path() -> str:
    """Path of the library the package loads ($AUTOGRAD_DEVICE_LOGGING_LIBRARY
    overrides the copy installed next to the package)."""
    return _native.library_path(settings.read().library)


def write_process_record() -> bool:
    """Writes this process's record for the fleet report now, if
    AUTOGRAD_DEVICE_LOGGING_REPORT_DIR (or the launcher's --report) named a
    directory, and waits for it: the library's writer thread does the I/O,
    and the wait ends after 2 s (False then, as when the write failed). The
    library also writes it at the process's first backward pass, when an
    event is first raised, and at exit (which a process that leaves through
    os._exit never reaches); each write replaces the process's one record.
    False before the library is loaded."""
    lib = _activation.library()
    if lib is None:
        return False
    _measurement.record_counts()
    return bool(lib.autograd_device_logging_write_process_record())


@dataclasses.dataclass(frozen=True)
class Status:
    """What the library has done in this process."""

    #: libtorch's Engine::execute has called the patched compute_dependencies.
    active: bool
    #: Events this process's backward passes raised (each at most once per
    #: process): the library logged them, or torch did where it logs them
    #: itself (torch_logs_events).
    events_raised: FrozenSet[str]
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
    #: the launcher", "by preload" (LD_PRELOAD), "linked", or "not loaded"
    #: (also before torch is imported, when it loads).
    activated_by: str
    #: Built against a torch that logs both events itself (2.14 and later):
    #: the library classifies every pass as on earlier releases and leaves
    #: the logging to torch.
    torch_logs_events: bool = False
    #: What the threading-cost measurement found (None while it is off):
    #: per device class, the pairs measured and the median difference
    #: between single-threaded and multithreaded backward.
    threading_cost: Optional[ThreadingCost] = None
    #: Single-device passes run on the calling thread
    #: (set_calling_thread_backward).
    calling_thread: bool = False

    @property
    def events_emitted(self) -> FrozenSet[str]:
        """Deprecated: events_raised, under its old name."""
        warnings.warn(
            "Status.events_emitted is deprecated: use Status.events_raised",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.events_raised


def status() -> Status:
    """Reads the library's state without running anything."""
    lib = _activation.library()
    if lib is None:
        return Status(
            False,
            frozenset(),
            0,
            _activation.load_error(),
            "",
            "",
            library_path(),
            _activation.how(),
        )
    raised = lib.autograd_device_logging_events_raised()
    decode = _native.decode
    return Status(
        active=bool(lib.autograd_device_logging_active()),
        events_raised=frozenset(
            name for name, bit in vocabulary.EVENT_BITS.items() if raised & bit
        ),
        nodes_inspected=int(lib.autograd_device_logging_nodes_inspected()),
        disabled_reason=(
            decode(lib.autograd_device_logging_disabled_reason()) or _activation.late_reason()
        ),
        built_for_torch=decode(lib.autograd_device_logging_built_for_torch()) or "",
        running_torch=decode(lib.autograd_device_logging_running_torch()) or "",
        library_path=decode(lib.autograd_device_logging_library_path()) or library_path(),
        activated_by=_activation.how(),
        torch_logs_events=bool(lib.autograd_device_logging_torch_logs_events()),
        threading_cost=threading_cost(),
        calling_thread=bool(lib.autograd_device_logging_calling_thread()),
    )


def is_active() -> bool:
    """Whether libtorch calls the patched compute_dependencies.

    Imports torch (which loads the library, where it is pending) and, if no
    backward pass has run yet, runs one on a one-element CPU tensor (which
    binds libtorch's call the way the first real pass would).
    """
    import torch

    lib = _activation.library()
    if lib is None:
        return False
    if not lib.autograd_device_logging_active():
        with torch.enable_grad():
            torch.ones(1, requires_grad=True).sum().backward()
    return bool(lib.autograd_device_logging_active())


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
    lib = _activation.library()
    if lib is None:
        return DeviceStats(False, 0, 0, 0, 0, 0)
    out = (ctypes.c_uint64 * 5)()
    enabled = lib.autograd_device_logging_stats(out)
    return DeviceStats(bool(enabled), *(int(v) for v in out))


def enable_device_stats(enabled: bool = True) -> None:
    """Turns the per-pass statistics on (as AUTOGRAD_DEVICE_LOGGING_STATS=1
    does at load) or off. While on, a summary line goes to stderr at exit.
    Before torch is imported, it takes effect when the library loads; it does
    nothing when the library could not be loaded (status() says why)."""
    _activation.call_when_loaded(lambda lib: lib.autograd_device_logging_enable_stats(int(enabled)))


def reset_device_stats() -> None:
    _activation.call_when_loaded(lambda lib: lib.autograd_device_logging_reset_stats())


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
        *vocabulary.CLASSES,
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


def check_report() -> str:
    """A human-readable report: active or not, versions, and why not."""
    active = is_active()
    s = status()
    switched_off = _activation.switched_off()
    lines = [
        f"library:          {s.library_path}",
        f"built for torch:  {s.built_for_torch}",
        f"running torch:    {s.running_torch or 'unknown'}",
        f"active:           {'yes' if active and not s.disabled_reason and not switched_off else 'no'}",
        f"activated:        {s.activated_by}",
        f"import hook:      {_import_hook_state()}",
    ]
    if switched_off:
        lines.append(
            f"reason:           {switched_off}: the import hook does not load the library at "
            "`import torch`, so a process that does not import autograd_device_logging itself "
            "is not logged (this check imported it, to read the versions above)"
        )
    elif s.disabled_reason:
        lines.append(f"reason:           disabled: {s.disabled_reason}")
    elif not active:
        lines.append(
            "reason:           libtorch's Engine::compute_dependencies was "
            "already bound to its own definition when this library was "
            "loaded (Python binds an extension's symbols as it imports "
            "torch). " + _activation.NOT_ACTIVE_HINT
        )
    lines.append(
        "calling thread:   "
        + (
            "on: passes on one accelerator device run on the calling thread"
            if s.calling_thread
            else "off: every pass runs as torch runs it (set_calling_thread_backward(True) or "
            "AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD=1 keeps single-device passes on the "
            "calling thread)"
        )
    )
    lines.append("threading cost:   " + _threading_cost_line(s.threading_cost))
    events = ", ".join(sorted(s.events_raised)) or "none"
    if s.torch_logs_events:
        events += f" (logged by torch {s.running_torch or ''} itself, not by this library)"
    lines.append("events raised:    " + events)
    return "\n".join(lines)


def _threading_cost_line(cost: Optional[ThreadingCost]) -> str:
    if cost is None:
        return (
            f"not measured (measure_threading() or {_measurement.ENV}=1 turns it on, "
            "for Python programs; C++ programs are not measured)"
        )
    pairs = ", ".join(f"{c}: {v.pairs}" for c, v in cost.classes.items()) or "none yet"
    return f"measuring (Python's backward and grad; C++ programs are not measured); pairs: {pairs}"


def set_calling_thread_backward(enabled: bool = True) -> None:
    """Runs every later backward pass whose graph spans exactly one
    accelerator device, and no CPU-routed nodes, on the thread that starts
    it, root node included, as PyTorch's PR #192004 does; passes that span
    several devices keep the device threads (Note [Single-device passes on
    the calling thread], calling_thread_policy.h). Gradients, errors, hooks
    and the caller's own set_multithreading_enabled setting (also as read
    inside a hook) are those of stock torch. Works
    before or after `import torch`; raises RuntimeError where this torch
    lacks the seam it needs."""

    def apply(lib) -> None:
        if not lib.autograd_device_logging_set_calling_thread(int(bool(enabled))):
            raise RuntimeError(
                "autograd_device_logging: this torch's GraphTask has no id_, which "
                "single-device passes on the calling thread need to tell passes apart"
            )

    _activation.call_when_loaded(apply)


def measure_threading(enabled: bool = True, **settings) -> None:
    """Measures what single-threaded backward would cost this process
    (Note [Measuring the cost of single-threaded backward],
    threading_measurement.py): pairs of backward passes, one with
    multithreading off and one with it on, per device class. `settings` are
    those of threading_measurement.Settings (rate, warmup, max_pairs, seed,
    washout). Results are in threading_cost(), status() and the per-process
    record. Works before or after `import torch` (Note [Measuring from before
    torch is imported]); enabled=False stops it (what it measured is kept in
    the record)."""
    _activation.request_measurement(_measurement.Settings(**settings) if enabled else False)


def threading_cost() -> Optional[ThreadingCost]:
    """What the measurement found so far; None when it never ran."""
    return _measurement.result()


def _import_hook_state() -> str:
    if _activation.pth_installed():
        return "installed: every process of this environment loads the library at `import torch`"
    return "off here: " + _activation.why_pth_not_installed()


_activation.activate("by import")
