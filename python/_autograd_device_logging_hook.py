"""Loads autograd_device_logging the first time a process imports torch.

Note [The import hook costs a process without torch one line]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
autograd_device_logging.pth, which site runs at every interpreter start-up,
is one line: unless the interpreter is isolated (python -I) or torch is
already imported, it puts a finder named LoadBeforeTorch at the front of
sys.meta_path. The finder finds nothing; at the first lookup of torch it
imports this module and calls load_before_torch() (Note [The .pth cannot
break import torch]), which removes the finder and, unless
AUTOGRAD_DEVICE_LOGGING has an off value (0, false, no, off) by then,
imports autograd_device_logging: the library is loaded with RTLD_GLOBAL
before torch's extension module binds Engine::compute_dependencies.
Importing a module from the .pth itself would cost every Python process in
the environment a site-packages lookup and an unmarshal at start-up, whether
it imports torch or not. What the line costs is compiling it, and site
compiles it twice in a venv (site.venv() and then site.main() each process
the venv's site-packages), so it holds only what start-up needs: the switch
is read at torch's lookup, not at start-up; the finder is a module object,
cheaper to make than a class; and the second copy's finder is not prevented
(a check costs more than the finder) but removed with the first at torch's
lookup.
docs/startup.md measures what it costs a process that never imports torch.
python -S does not run site, so nothing is installed. Nothing here raises
into `import torch`: a failure is one warning.

Note [The .pth cannot break import torch]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The finder runs inside torch's own import, so anything it raises is raised
by `import torch`. A site-packages copied in part into an image, a file
removed by hand, or a second interpreter reading the same site directory can
leave the .pth without this module, or this module or the package without
its files or with a syntax error. So the finder does not import this module
bare: at the lookup of torch it runs a small guarded block, kept in the .pth
as a string and compiled only then (a lambda cannot hold a try, and
compiling the block at every interpreter start-up would cost every process
that never imports torch). Any exception from importing this module or
running load_before_torch() removes the finder and becomes one
RuntimeWarning, or one line on stderr where warnings are errors (-W error);
torch is then imported without the library. load_before_torch() guards the
package's import the same way. test/test_pth_guard.py tries each case.
"""

import os
import sys

ENV = "AUTOGRAD_DEVICE_LOGGING"
FINDER_NAME = "LoadBeforeTorch"
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
#: Whether the finder has met torch in this process (and stepped aside).
fired = False


def _warn(message):
    text = "autograd_device_logging: " + message
    try:
        import warnings

        warnings.warn_explicit(text, RuntimeWarning, __file__, 0, module=__name__)
    except Exception:  # -W error makes it one: never into `import torch`
        try:
            sys.stderr.write(text + "\n")
        except Exception:
            pass


def _finders():
    return [f for f in sys.meta_path if getattr(f, "__name__", None) == FINDER_NAME]


def installed():
    """Whether the .pth installed its finder in this process and the switch
    lets it load the package (the finder may have stepped aside since, at the
    first import of torch). The .pth leaves the switch to the finder."""
    return (fired or bool(_finders())) and os.environ.get(ENV, "").lower() not in _OFF


def load_before_torch():
    """The .pth's finder calls this at the first lookup of torch."""
    global fired
    fired = True
    for finder in _finders():
        sys.meta_path.remove(finder)
    try:
        value = os.environ.get(ENV, "")
        if value.lower() in _OFF:
            # The program turned the switch off itself, after start-up and
            # before importing torch: that is an off value, not a bad one.
            return None
        if value and value.lower() not in _ON:
            _warn(
                f"ignoring {ENV}={value}: use 1, true, yes or on, or 0, false, no or off "
                "(any case); using the default, on."
            )
        imported_before = "autograd_device_logging" in sys.modules
        import autograd_device_logging

        if not imported_before:
            autograd_device_logging._activated("on torch import")
        # Note [Measuring from before torch is imported] (the package).
        return autograd_device_logging._torch_spec()
    except Exception as e:  # never into `import torch`
        _warn(f"the import hook could not load the package ({type(e).__name__}: {e})")
    return None


def why_not_installed():
    """Why the .pth did not install the finder in this process."""
    value = os.environ.get(ENV, "")
    if sys.flags.no_site:
        return "python -S skips site, which installs it"
    if value.lower() in _OFF:
        return f"{ENV}={value}"
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
