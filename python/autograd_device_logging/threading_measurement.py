"""What single-threaded backward would cost this job, measured inside it.

Note [Measuring the cost of single-threaded backward]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Opt-in (AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING=1, the launcher's
--measure-threading, or measure_threading()). torch.autograd.backward and
torch.autograd.grad are wrapped (Tensor.backward calls the former). After
`warmup` passes, each pass starts a pair with probability `rate`, until
`max_pairs` pairs were measured (or twice as many tried). A pair is two
consecutive passes, one with multithreading off and one with it on, in random
order. The mode is set through c10's autograd state around the call
(torch.autograd.set_multithreading_enabled's flag), which the engine reads
when the pass starts and the GraphTask keeps for the whole pass. Each timed
pass runs from the call to the end of its device work: the devices of its
roots and of earlier sampled passes are synchronized before it, the devices
it spanned after it, on sampled passes only. The library takes the pass's
census (Note [A census on request], pass_census.h), so each pass is
attributed to its own device class, decided as the events are. A pair counts
only if both passes have the same class and the same number of nodes (the
same graph, as in consecutive training steps).

The random choices come from a generator seeded by the job's name as the record
gives it, else torch.distributed's rendezvous address (or
AUTOGRAD_DEVICE_LOGGING_MEASURE_SEED), and one is drawn per pass after the
warm-up: the ranks of a data-parallel job sample the same passes in the same
modes, so no rank's timed pass waits on a peer running the other mode.

Never sampled, and so never changed (the pass runs as without measurement;
its reason is counted): a pass started while another backward runs in the
process (nested or reentrant backward, checkpoint with use_reentrant=True, a
backward inside another backward's hook, another thread's pass), a caller
that turned multithreading off itself, compiled autograd, and code being
traced by torch.compile. A sampled pass during which another backward started
is discarded, and the process stops sampling: such a program does it on every
step. An exception in a sampled pass propagates unchanged, the caller's mode
is restored, and the pair is discarded. Only the scheduling of the pass
changes, never what it computes.

C++ programs are not measured: the library sits in compute_dependencies, after
Engine::execute read the mode, so the mode can only be set by a wrapper around
the program's own call.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import random
import statistics
import sys
import threading
import time
import zlib
from collections import Counter
from typing import Dict, List, Optional, Tuple

from . import settings as _package_settings
from . import vocabulary
from .threading_measurement_settings import Settings, settings_from

CLASSES = vocabulary.CLASSES
ENV = _package_settings.MEASURE_THREADING
#: The wrapped entry points of torch.autograd.
WRAPPED = ("backward", "grad")


@dataclasses.dataclass(frozen=True)
class ClassCost:
    """The measured pairs of one device class."""

    pairs: int
    #: Medians of the passes, with multithreading off and on (ms).
    median_off_ms: float
    median_on_ms: float
    #: Median over pairs of (off - on): positive when single-threaded is slower.
    median_difference_ms: float
    #: Median over pairs of (off - on) / on, in percent.
    median_difference_percent: float
    #: The spread of the per-pair percentages: first and third quartile.
    quartiles_percent: Tuple[float, float]


@dataclasses.dataclass(frozen=True)
class ThreadingCost:
    """What the measurement found in this process."""

    enabled: bool
    settings: Settings
    classes: Dict[str, ClassCost]
    #: Passes drawn for a pair but not sampled, by reason.
    not_sampled: Dict[str, int]
    #: Pairs started but not kept, by reason.
    discarded: Dict[str, int]


def summarize_pairs(pairs) -> Optional[ClassCost]:
    """The medians and quartiles of [(off_ns, on_ns), ...]; None for none."""
    if not pairs:
        return None
    off = [p[0] for p in pairs]
    on = [p[1] for p in pairs]
    percent = [100.0 * (a - b) / b for a, b in pairs]
    if len(percent) > 1:
        q1, _, q3 = statistics.quantiles(percent, n=4, method="inclusive")
    else:
        q1 = q3 = percent[0]
    return ClassCost(
        pairs=len(pairs),
        median_off_ms=statistics.median(off) / 1e6,
        median_on_ms=statistics.median(on) / 1e6,
        median_difference_ms=statistics.median(a - b for a, b in pairs) / 1e6,
        median_difference_percent=statistics.median(percent),
        quartiles_percent=(q1, q3),
    )


def _job_seed(lib) -> int:
    """The same on every rank of a job (Note [Measuring the cost of
    single-threaded backward]): the job's name as the record gives it, or
    else the rendezvous torch.distributed was told; random without either."""
    name = ctypes.create_string_buffer(1024)
    if lib.autograd_device_logging_job_wide_name(name, len(name)):
        job = name.value.decode("utf-8", "replace")
    else:
        job = _package_settings.read().rendezvous
    return zlib.crc32(job.encode()) if job else random.SystemRandom().getrandbits(32)


class _Pass:
    """The first pass of a pair, measured."""

    __slots__ = ("multithreading", "ns", "device_class", "nodes")

    def __init__(self, multithreading, ns, device_class, nodes):
        self.multithreading = multithreading
        self.ns = ns
        self.device_class = device_class
        self.nodes = nodes


class Sampler:
    """Wraps torch.autograd's entry points and measures sampled pairs."""

    def __init__(self, lib, settings: Settings, torch_module):
        self._lib = lib
        self._torch = torch_module
        self.settings = settings
        seed = settings.seed if settings.seed is not None else _job_seed(lib)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._active = 0
        self._started = 0
        self._passes = 0
        self._tried = 0
        self._measured = 0
        self._stopped = False
        self._first: Optional[_Pass] = None
        # The passes left of the pair under way: (multithreading, timed).
        self._plan: List[Tuple[bool, bool]] = []
        self._pairs: Dict[str, list] = {c: [] for c in CLASSES}
        self._not_sampled: Counter = Counter()
        self._discarded: Counter = Counter()
        self._devices: set = set()
        self._originals = {}
        self._devices_buffer = ctypes.create_string_buffer(1024)

    # -- wrapping ---------------------------------------------------------

    def install(self) -> None:
        autograd = self._torch.autograd
        for name in WRAPPED:
            original = getattr(autograd, name)
            if getattr(original, "_autograd_device_logging_wrapped", False):
                original = original.__wrapped__
            self._originals[name] = original
            setattr(autograd, name, self._wrap(original))

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(self._torch.autograd, name, original)
        self._originals.clear()

    def installed(self) -> bool:
        return bool(self._originals)

    def _wrap(self, original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            return self.run(original, args, kwargs)

        wrapper._autograd_device_logging_wrapped = True
        return wrapper

    def _done(self) -> bool:
        return (
            self._stopped
            or self._measured >= self.settings.max_pairs
            or self._tried >= 2 * self.settings.max_pairs
        )

    # -- one call ---------------------------------------------------------

    def run(self, original, args, kwargs):
        if self._done():
            return original(*args, **kwargs)
        with self._lock:
            self._active += 1
            self._started += 1
            started = self._started
            try:
                planned = self._decide()
            except BaseException:
                self._active -= 1
                raise
        try:
            if planned is None:
                return original(*args, **kwargs)
            multithreading, timed = planned
            if timed:
                return self._timed(original, args, kwargs, multithreading, started)
            return self._untimed(original, args, kwargs, multithreading, started)
        finally:
            with self._lock:
                self._active -= 1

    def _abandon(self, reason: str) -> None:
        """Under the lock: the pair under way is not kept."""
        self._plan = []
        self._first = None
        self._discarded[reason] += 1

    def _decide(self) -> Optional[Tuple[bool, bool]]:
        """Under the lock: (multithreading, timed) if the pass is part of a
        pair, else None."""
        self._passes += 1
        if self._passes <= self.settings.warmup or self._done():
            return None
        under_way = bool(self._plan) or self._first is not None
        if self._nested():
            # Never part of a pair, and no draw: the pair under way (whose
            # pass this one runs inside or beside) is discarded when it ends.
            if under_way:
                self._not_sampled["inside or beside another backward"] += 1
            return None
        if not self._plan:
            if self._rng.random() >= self.settings.rate:
                return None
            first = self._rng.random() < 0.5
            washout = self.settings.washout
            self._plan = (
                [(first, False)] * washout
                + [(first, True)]
                + [(not first, False)] * washout
                + [(not first, True)]
            )
        planned = self._plan.pop(0)
        reason = self._why_not_sampled()
        if reason is not None:
            self._not_sampled[reason] += 1
            if under_way:
                self._abandon("pair interrupted")
            else:
                self._plan = []
            return None
        if not under_way:
            self._tried += 1
        return planned

    def _nested(self) -> bool:
        return self._active > 1 or self._torch._C._current_graph_task_id() != -1

    def _why_not_sampled(self) -> Optional[str]:
        torch = self._torch
        if self._nested():
            return "inside or beside another backward"
        if not self._lib.autograd_device_logging_multithreading_enabled():
            return "multithreading already off"
        compiled = sys.modules.get("torch._dynamo.compiled_autograd")
        if compiled is not None and getattr(compiled, "compiled_autograd_enabled", False):
            return "compiled autograd"
        compiler = getattr(torch, "compiler", None)
        if compiler is not None and getattr(compiler, "is_compiling", lambda: False)():
            return "inside torch.compile"
        return None

    def _sync(self, devices) -> None:
        torch = self._torch
        for name in devices:
            device = torch.device(name)
            module = getattr(torch, device.type, None)
            synchronize = getattr(module, "synchronize", None)
            if synchronize is not None:
                synchronize(device.index)

    def _root_devices(self, args, kwargs):
        roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
        if isinstance(roots, self._torch.Tensor):
            roots = (roots,)
        try:
            return {
                str(t.device)
                for t in roots
                if isinstance(t, self._torch.Tensor) and t.device.type != "cpu"
            }
        except TypeError:
            return set()

    @contextlib.contextmanager
    def _in_mode(self, multithreading):
        """Runs the body in `multithreading`'s mode and restores the caller's;
        an exception abandons the pair and propagates unchanged."""
        lib = self._lib
        previous = lib.autograd_device_logging_set_multithreading_enabled(int(multithreading))
        try:
            yield
        except BaseException:
            with self._lock:
                self._abandon("exception in the pass")
            raise
        finally:
            lib.autograd_device_logging_set_multithreading_enabled(previous)

    def _untimed(self, original, args, kwargs, multithreading, started):
        """A pass of the pair's plan that only sets the mode for the next."""
        with self._in_mode(multithreading):
            result = original(*args, **kwargs)
        with self._lock:
            if started != self._started:
                self._abandon("another backward ran during it")
                self._stopped = True
        return result

    def _timed(self, original, args, kwargs, multithreading, started):
        lib = self._lib
        self._sync(self._root_devices(args, kwargs) | self._devices)
        if not lib.autograd_device_logging_request_pass_census():
            with self._lock:
                self._stopped = True
                self._abandon("library disabled")
            return original(*args, **kwargs)
        nodes = ctypes.c_uint64(0)
        try:
            with self._in_mode(multithreading):
                start = time.perf_counter_ns()
                result = original(*args, **kwargs)
        finally:
            # Withdraws the request, whatever happened.
            device_class = lib.autograd_device_logging_take_pass_census(
                self._devices_buffer, len(self._devices_buffer), ctypes.byref(nodes)
            )
        spanned = [d for d in self._devices_buffer.value.decode().split(",") if d]
        self._sync(spanned)
        elapsed = time.perf_counter_ns() - start
        self._record(multithreading, max(elapsed, 1), device_class, nodes.value, spanned, started)
        return result

    def _record(self, multithreading, ns, device_class, nodes, spanned, started) -> None:
        with self._lock:
            self._devices.update(spanned)
            if started != self._started:
                # A nested, reentrant or concurrent backward ran inside it.
                self._abandon("another backward ran during it")
                self._stopped = True
                return
            if device_class < 0:
                self._abandon("no census")
                return
            this = _Pass(multithreading, ns, CLASSES[device_class], nodes)
            first = self._first
            if first is None:
                self._first = this
                return
            self._first = None
            if first.device_class != this.device_class or first.nodes != this.nodes:
                self._discarded["graph changed"] += 1
                return
            off, on = (first, this) if not first.multithreading else (this, first)
            self._pairs[this.device_class].append((off.ns, on.ns))
            self._measured += 1
        # The counts first: the pair asks for the write that carries both.
        self.record_counts()
        self._lib.autograd_device_logging_record_measured_pair(device_class, off.ns, on.ns)

    # -- results ----------------------------------------------------------

    def record_fields(self) -> dict:
        """What this sampler found, in the shape of the record's
        `threading_cost` (schema/process_record.schema.json), which the
        library writes from what record_counts() and each pair hand it."""
        with self._lock:
            return {
                "pairs": {c: [list(p) for p in pairs] for c, pairs in self._pairs.items() if pairs},
                "not_sampled": dict(self._not_sampled),
                "discarded": dict(self._discarded),
                "rate": self.settings.rate,
                "warmup": self.settings.warmup,
                "max_pairs": self.settings.max_pairs,
                "washout": self.settings.washout,
            }

    def record_counts(self) -> None:
        """Hands the library the counts by reason for the record (its pairs
        go over one by one, as they are measured)."""
        with self._lock:
            counts = [(0, self._not_sampled), (1, self._discarded)]
            counts = [(which, reason, n) for which, c in counts for reason, n in c.items()]
        record = self._lib.autograd_device_logging_record_measurement_count
        for which, reason, n in counts:
            record(which, reason.encode(), n)

    def result(self, enabled: bool = True) -> ThreadingCost:
        with self._lock:
            pairs = {c: list(p) for c, p in self._pairs.items() if p}
            not_sampled = dict(self._not_sampled)
            discarded = dict(self._discarded)
        return ThreadingCost(
            enabled=enabled,
            settings=self.settings,
            classes={c: summarize_pairs(p) for c, p in pairs.items()},
            not_sampled=not_sampled,
            discarded=discarded,
        )


# Note [Measuring from before torch is imported]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The sampler wraps torch.autograd's functions, which exist only once torch's
# module ran. Asked for before that (by the environment, or by
# measure_threading() before `import torch`), it is installed by the finder
# that loads the library at torch's lookup (Note [Activation],
# _activation.py): the finder finds torch's spec as the finders behind it
# would, and hands the import system that spec with its loader wrapped, so
# that the sampler is installed right after torch's module ran. The wrapper
# delegates everything else to torch's own loader, and puts that loader back
# into the module's __loader__ and __spec__ once the module ran, so nothing of
# it outlives the import; torch's loader itself is never changed.
class _StartAfterExec:
    """torch's loader, with the sampler started after exec_module."""

    def __init__(self, loader, lib, settings):
        self._loader = loader
        self._lib = lib
        self._settings = settings

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        start(self._lib, self._settings, module)


def torch_spec_measured_after_exec(lib, settings: Settings):
    """torch's spec as the finders behind the caller's find it, with its
    loader wrapped so that the sampler starts once torch's module ran; the
    spec unchanged where its loader cannot be wrapped."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    loader = getattr(spec, "loader", None)
    if loader is None or not hasattr(loader, "exec_module"):
        return spec
    spec.loader = _StartAfterExec(loader, lib, settings)
    return spec


#: The sampler of this process, while one was started.
_sampler: Optional[Sampler] = None


def start(lib, settings: Settings, torch_module) -> None:
    """Starts measuring, replacing a sampler started before."""
    global _sampler
    stop()
    _sampler = Sampler(lib, settings, torch_module)
    # What an earlier sampler handed the record is dropped with it.
    # With the thread that measures and the intra-op threads, for where the
    # threads ran (Note [Where the measured threads ran], thread_placement.h).
    lib.autograd_device_logging_start_recording_threading_cost(
        settings.rate,
        settings.warmup,
        settings.max_pairs,
        settings.washout,
        threading.get_native_id(),
        torch_module.get_num_threads(),
    )
    _sampler.install()


def stop() -> None:
    """Stops measuring; what was measured is kept."""
    if _sampler is not None:
        _sampler.uninstall()


def sampler() -> Optional[Sampler]:
    return _sampler


def result() -> Optional[ThreadingCost]:
    """What the measurement found so far; None when it never ran."""
    if _sampler is None:
        return None
    return _sampler.result(enabled=_sampler.installed())


def record_counts() -> None:
    if _sampler is not None:
        _sampler.record_counts()


def warn_once(message: str) -> None:
    # Imported here: the tests load this module by itself, outside the package.
    from . import _user_warning

    _user_warning.warn(message)
