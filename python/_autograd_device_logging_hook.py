"""Loads autograd_device_logging the first time a process imports torch.

autograd_device_logging.pth, installed next to this module, imports it when
the interpreter starts (site). It puts one finder at the front of
sys.meta_path that finds nothing: at the first lookup of torch it imports
autograd_device_logging, which loads the library with RTLD_GLOBAL before
torch's extension module binds Engine::compute_dependencies, and steps aside.
A process that never imports torch pays for this module and one function call
per import, and never loads the library or libtorch.

Off with AUTOGRAD_DEVICE_LOGGING=0 (also false/no/off), and under python -I,
which keeps site-packages' .pth files but should keep a process isolated from
its environment; python -S does not run site at all. This module never raises:
a failure is one warning, and `import torch` goes on.
"""

import os
import sys

ENV = "AUTOGRAD_DEVICE_LOGGING"
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")

#: Why the hook is not installed in this process (None while it is).
not_installed_because = None


def _warn(message):
    import warnings

    warnings.warn_explicit(
        "autograd_device_logging: " + message, RuntimeWarning, __file__, 0, module=__name__
    )


class LoadBeforeTorch:
    """A sys.meta_path entry: at the first lookup of torch, loads the library."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        uninstall()
        try:
            imported_before = "autograd_device_logging" in sys.modules
            import autograd_device_logging

            if not imported_before:
                autograd_device_logging._activated("on torch import")
        except Exception as e:  # never into `import torch`
            _warn(f"the import hook could not load the package ({type(e).__name__}: {e})")
        return None


def uninstall():
    try:
        sys.meta_path.remove(LoadBeforeTorch)
    except ValueError:
        pass


def install():
    global not_installed_because
    value = os.environ.get(ENV, "")
    if value.lower() in _OFF:
        not_installed_because = f"{ENV}={value}"
    elif sys.flags.isolated:
        not_installed_because = "python -I"
    elif "torch" in sys.modules:
        not_installed_because = "torch was imported before site ran autograd_device_logging.pth"
    else:
        if value and value.lower() not in _ON:
            _warn(
                f"ignoring {ENV}={value}: use 1, true, yes or on, or 0, false, no or off "
                "(any case); using the default, on."
            )
        if LoadBeforeTorch not in sys.meta_path:
            sys.meta_path.insert(0, LoadBeforeTorch)


install()
