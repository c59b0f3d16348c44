"""When and how the library comes into the process.

Note [Activation]
~~~~~~~~~~~~~~~~~
The library must be in the global scope before torch's extension module binds
Engine::compute_dependencies, and nowhere else is it needed: a process that
never imports torch (the fleet report, a tool that reads records) must not
load it, nor libtorch with it. So activation is one function, activate(how),
which the three ways in call, each once or more:

- `import autograd_device_logging` ("by import");
- the launcher, `python -m autograd_device_logging` ("by the launcher"),
  which imports the package first;
- the .pth that pip installs ("on torch import"): site puts a finder named
  LoadBeforeTorch at the front of sys.meta_path, and at the first lookup of
  torch it calls activate from inside that lookup (Note [The import hook
  costs a process without torch one line]).

Where torch is imported already, activate loads the library at once (too
late for the classifier, which the warning then says). Otherwise it puts a
finder of its own at the front of sys.meta_path, which finds nothing and
loads the library at the first lookup of torch; the last call before then
names how it came in. Once loaded, or once loading failed with its one
warning, further calls change nothing. A library that was in the process
already (LD_PRELOAD, or linked into the program) is taken as it is, and says
so ("by preload", "linked"). Nothing reads the command line: an entry point
that never imports torch never loads the library, by construction.

Settings made before the library is loaded (statistics, the record's
directory, the threading-cost measurement) wait for the load and are applied
right after it, before torch's module runs.

Note [The import hook costs a process without torch one line]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
autograd_device_logging.pth, which site runs at every interpreter start-up,
is one line: unless the interpreter is isolated (python -I) or torch is
already imported, it puts a finder named LoadBeforeTorch at the front of
sys.meta_path. The finder finds nothing; at the first lookup of torch it
removes itself and, unless AUTOGRAD_DEVICE_LOGGING has an off value (0,
false, no, off) by then, calls activate("on torch import"): the library is
loaded with RTLD_GLOBAL before torch's extension module binds
Engine::compute_dependencies. Importing a module from the .pth itself would
cost every Python process in the environment a site-packages lookup and an
unmarshal at start-up, whether it imports torch or not. What the line costs
is compiling it, and site compiles it twice in a venv (site.venv() and then
site.main() each process the venv's site-packages), so it holds only what
start-up needs: the switch is read at torch's lookup, not at start-up; the
finder is a module object, cheaper to make than a class; and the second
copy's finder is not prevented (a check costs more than the finder) but
removed with the first at torch's lookup. The off values are tested before
the package is imported, so that a switched-off process never imports it;
the package warns about a value that is neither on nor off. docs/startup.md
measures what the line costs a process that never imports torch. python -S
does not run site, so nothing is installed.

Note [The .pth cannot break import torch]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The finder runs inside torch's own import, so anything it raises is raised
by `import torch`. A site-packages copied in part into an image, a file
removed by hand, or a second interpreter reading the same site directory can
leave the .pth without the package, or the package without its files or
with a syntax error. So the finder does not import the package bare: at the
lookup of torch it runs a small guarded block, kept in the .pth as a string
and compiled only then (a lambda cannot hold a try, and compiling the block
at every interpreter start-up would cost every process that never imports
torch). Any exception from importing the package or from activate() removes
the finder and becomes one RuntimeWarning, or one line on stderr where
warnings are errors (-W error); torch is then imported without the library.
The package's own finder is guarded the same way, and so are its warnings
(_warn). test/test_pth_guard.py tries each case.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Callable, List, Optional

from autograd_device_logging import _native, _user_warning, settings
from autograd_device_logging import threading_measurement as _measurement
from autograd_device_logging.settings import SWITCH

#: The name of the .pth's finder in sys.meta_path.
PTH_FINDER_NAME = "LoadBeforeTorch"

_NOT_LOADED = "not loaded"
#: The loaded library, None before the load or when it failed.
_lib = None
#: Why the library is not loaded (None while loaded or not yet tried).
_load_error: Optional[str] = None
#: How the library came in (Status.activated_by), or the way asked for last
#: while the load is pending.
_how = _NOT_LOADED
_pending_how: Optional[str] = None
#: Calls waiting for the load (call_when_loaded).
_when_loaded: List[Callable] = []
#: The program the per-process record names, where the launcher knows better
#: than __main__ does.
_program: Optional[str] = None
#: The .pth's finder met torch in this process.
_pth_fired = False
#: measure_threading() before the load: Settings, or False for off; None
#: leaves it to the environment.
_measurement_request = None
#: Why the loaded library cannot work: the package was imported after torch.
_late_reason: Optional[str] = None
# The package's settings, read once when it loads the library
# (Note [The package's settings], settings.py).
_settings: Optional[settings.Settings] = None


def _settings_at_load() -> settings.Settings:
    global _settings
    if _settings is None:
        _settings = settings.read(warn=_warn)
    return _settings


def library():
    """The loaded library, or None (not loaded yet, or it failed to load)."""
    return _lib


def how() -> str:
    return _how


def late_reason() -> Optional[str]:
    """Why the library, loaded after torch, logs nothing; None otherwise."""
    return _late_reason


def load_error() -> Optional[str]:
    if _lib is None and _load_error is None and _pending_how is not None:
        return "not loaded yet: the library loads when torch is imported (Note [Activation])"
    return _load_error


def _warn(message: str) -> None:
    """One warning line (Note [One warning style], _user_warning.py)."""
    _user_warning.warn(message)


class _LoadBeforeTorch:
    """The package's finder: loads the library at the first lookup of torch."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "torch":
            return None
        global _load_error
        try:
            return _at_torch_lookup(None)
        except Exception as e:  # never into `import torch`
            if _lib is None:
                _load_error = f"its activation failed ({type(e).__name__}: {e})"
            _warn(f"not loaded, so backward passes are not logged ({type(e).__name__}: {e})")
            return None


def _remove_finders() -> None:
    global _pth_fired
    kept = []
    for finder in sys.meta_path:
        if finder is _LoadBeforeTorch:
            continue
        if getattr(finder, "__name__", None) == PTH_FINDER_NAME:
            _pth_fired = True
            continue
        kept.append(finder)
    sys.meta_path[:] = kept


def activate(how: str):
    """Brings the library in, now or at the first import of torch (Note
    [Activation]). Safe to call any number of times. Where `how` is "on torch
    import", the .pth's finder is calling from inside torch's lookup: the
    return value is then torch's spec, or None to let the import system
    find it."""
    global _pending_how
    if how == "on torch import":
        return _at_torch_lookup(how)
    if _lib is not None or _load_error is not None:
        return None
    _pending_how = how
    if "torch" in sys.modules:
        _remove_finders()
        _load()
        _warn_if_too_late()
    elif _LoadBeforeTorch not in sys.meta_path:
        sys.meta_path.insert(0, _LoadBeforeTorch)
    return None


def _at_torch_lookup(how: Optional[str]):
    """At the first lookup of torch: loads the library unless `how` is the
    .pth's and its switch is off, and returns torch's spec where the
    threading-cost measurement must wrap torch's module as it runs."""
    global _pending_how
    _remove_finders()
    if how == "on torch import" and not _settings_at_load().switch:
        # The program turned the switch off itself, after start-up and
        # before importing torch: that is an off value, not a bad one.
        return None
    if _lib is not None or _load_error is not None:
        return None
    if how is not None:
        _pending_how = how
    measurement = _load()
    if measurement is None:
        return None
    return _measurement.torch_spec_measured_after_exec(_lib, measurement)


def _load():
    """Loads the library; returns the threading-cost measurement's Settings
    where it is asked for and torch's module has not run yet."""
    global _lib, _load_error, _how
    loaded_with = _settings_at_load()
    path = _native.library_path(loaded_with.library)
    try:
        lib, already = _native.load(path)
    except (OSError, AttributeError) as e:  # AttributeError: a symbol is missing
        fix = (
            f"unset {settings.LIBRARY} or point it at a built {_native.LIBRARY_NAME}"
            if loaded_with.library
            else "reinstall autograd_device_logging for this Python and torch"
        )
        _load_error = f"the library {path} could not be loaded: {e}"
        _how = _NOT_LOADED
        _when_loaded.clear()
        _warn(f"backward passes are not logged: {_load_error}. Fix: {fix}.")
        return None
    _lib = lib
    _how = already or _pending_how or "by import"
    # The program, while __main__ still says what it is (Note [A process's
    # identity is decided once, at start-up], process_identity.h).
    tell_record()
    # Python's atexit runs before the library's: the measurement's counts are
    # complete by then.
    atexit.register(_measurement.record_counts)
    if loaded_with.otlp:
        # Note [Pushing the counts over OTLP] (otlp_export.py): the SDK is
        # imported only then.
        from autograd_device_logging import otlp_export

        otlp_export.start(lib, loaded_with)
    calls, _when_loaded[:] = list(_when_loaded), []
    for call in calls:
        call(lib)
    measurement = _measurement_settings()
    if measurement is not None and "torch" in sys.modules:
        _measurement.start(lib, measurement, sys.modules["torch"])
        return None
    return measurement


def call_when_loaded(call: Callable) -> None:
    """call(library) now if it is loaded, right after the load if it is
    pending, and never if it failed."""
    if _lib is not None:
        call(_lib)
    elif _load_error is None:
        _when_loaded.append(call)


def _measurement_settings():
    if _measurement_request is False:
        return None
    if _measurement_request is not None:
        return _measurement_request
    return _measurement.settings_from(_settings_at_load(), _measurement.warn_once)


def request_measurement(measurement) -> None:
    """measure_threading(): Settings, or False to stop."""
    global _measurement_request
    _measurement_request = measurement
    if measurement is False:
        _measurement.stop()
        return
    torch = sys.modules.get("torch")
    if _lib is not None and torch is not None and hasattr(getattr(torch, "autograd", None), "grad"):
        _measurement.start(_lib, measurement, torch)


def set_program(program: str) -> None:
    """The program the record names, for the launcher: its script, or
    "-m MODULE"."""
    global _program
    _program = program
    tell_record()


def _main_program() -> str:
    """The program as __main__ gives it: a script's path, "-m MODULE", or
    "-c" for a command (the interpreter's path where none of these is known)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        return (
            f"-m {spec.name[:-len('.__main__')] if spec.name.endswith('.__main__') else spec.name}"
        )
    path = getattr(main, "__file__", None)
    if path:
        return path
    if main is not None and sys.flags.interactive == 0 and not hasattr(sys, "ps1"):
        return "-c"
    return sys.executable


def tell_record() -> None:
    """Gives the library what its per-process record (Note [The per-process
    record]) cannot know from C++: the program and how the library came in.
    Called when the library loads, not later: CPython drops
    __main__.__file__ once the script has returned."""
    if _lib is not None:
        program = _program or _main_program()
        _lib.autograd_device_logging_set_record_program(os.fsencode(program))
        _lib.autograd_device_logging_set_record_activation(_how.encode())
        # The processes this one starts join its job (Note [A child joins
        # the job of the program that started it], process_identity.h); a
        # launcher's (torchrun's agent's) children are named by their own.
        if _lib.autograd_device_logging_process_role() != b"agent":
            settings.set_for_children(settings.PROGRAM, program)


# -- The .pth ---------------------------------------------------------------


def switched_off() -> Optional[str]:
    """ "NAME=VALUE" where the switch has an off value, else None."""
    now = settings.read()
    return None if now.switch else f"{SWITCH}={now.switch_value}"


def pth_installed() -> bool:
    """Whether the .pth installed its finder in this process and the switch
    lets it load the library (the finder may have stepped aside since, at the
    first import of torch). The .pth leaves the switch to the finder."""
    present = any(getattr(f, "__name__", None) == PTH_FINDER_NAME for f in sys.meta_path)
    return (_pth_fired or present) and settings.read().switch


def why_pth_not_installed() -> str:
    """Why the .pth did not install its finder in this process."""
    now = settings.read()
    if sys.flags.no_site:
        return "python -S skips site, which installs it"
    if not now.switch:
        return f"{SWITCH}={now.switch_value}"
    if sys.flags.isolated:
        return "python -I"
    import site

    dirs = site.getsitepackages() + [site.getusersitepackages()]
    if not any(os.path.exists(os.path.join(d, "autograd_device_logging.pth")) for d in dirs):
        return (
            "autograd_device_logging.pth is not installed: the package was found on "
            "PYTHONPATH or in a source tree, not installed by pip"
        )
    return "torch was imported before site ran autograd_device_logging.pth"


NOT_ACTIVE_HINT = (
    "Import autograd_device_logging before torch, or run the program with "
    "`python -m autograd_device_logging script.py ...`."
)


def _warn_if_too_late() -> None:
    """After a load into a process that had imported torch already: one
    warning where libtorch is bound to its own compute_dependencies."""
    if _lib is None or _how != _pending_how:
        return  # not loaded, or in the process before (preload, linked)
    if not _lib.autograd_device_logging_active():
        import torch

        with torch.enable_grad():
            torch.ones(1, requires_grad=True).sum().backward()
    if _lib.autograd_device_logging_active():
        return
    global _late_reason
    _late_reason = (
        "imported after torch: libtorch bound Engine::compute_dependencies to its own "
        "definition when torch was imported, so backward passes in this process are not "
        "logged. " + NOT_ACTIVE_HINT
    )
    _warn(
        "imported after torch: libtorch bound "
        "Engine::compute_dependencies to its own definition when torch was "
        "imported, so backward passes in this process are not logged. "
        + NOT_ACTIVE_HINT
        + " (The import hook that loads it at `import torch` did not run: "
        + why_pth_not_installed()
        + ".)"
    )
