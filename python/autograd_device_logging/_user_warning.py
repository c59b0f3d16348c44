"""The package's one way to warn (Note [One warning style]).

Note [One warning style]
~~~~~~~~~~~~~~~~~~~~~~~~
Every warning of this project, from C++ (warn_to_stderr,
device_logging_state.h) or Python (warn below), is one line that starts with
PREFIX, so that `grep autograd_device_logging:` finds each one. A Python
warning is a RuntimeWarning attributed to the user's line that led to it
(the first frame outside this package, Python's import system and torch: the
`import torch`, say), as warnings.warn(stacklevel=...) would, so that
Python's filters and -W work on it; where no such frame exists (at exit, or
a program started as a string), it is printed as the C++ warnings are,
without a file and line, never as this package's file at line 0; so is one
from a thread the package started (the OTLP export's), whose stack holds no
line of the user's. It never
raises: it may run inside `import torch`, and -W error turns a warning into
an exception there.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

PREFIX = "autograd_device_logging: "

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _not_the_users(filename: str) -> bool:
    return (
        filename.startswith(_PACKAGE)
        or filename.startswith("<frozen importlib")
        or filename.startswith("<frozen runpy")
        or f"{os.sep}torch{os.sep}" in filename
        or filename.endswith("autograd_device_logging.pth")
        or filename == threading.__file__
    )


def users_frame():
    """The innermost frame of the user's code on the stack, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _not_the_users(filename):
            return None if filename.startswith("<") else frame
        frame = frame.f_back
    return None


def warn(message: str) -> None:
    """`message`, after PREFIX, as one warning line (Note [One warning
    style])."""
    text = message if message.startswith(PREFIX) else PREFIX + message
    try:
        frame = users_frame()
        if frame is None:
            sys.stderr.write(text + "\n")
            return
        warnings.warn_explicit(
            text,
            RuntimeWarning,
            frame.f_code.co_filename,
            frame.f_lineno,
            module=frame.f_globals.get("__name__"),
            registry=frame.f_globals.setdefault("__warningregistry__", {}),
        )
    except Exception:
        try:
            sys.stderr.write(text + "\n")
        except Exception:
            pass
