"""python -m autograd_device_logging [--check] [script.py | -m module] [args...]

Runs a Python program with autograd device logging active: this package is
imported (loading the library) before the program can import torch. Nothing
is put into the environment, so child processes (compilers started by
torch.compile, for example) do not inherit the library.
"""

import runpy
import sys

import autograd_device_logging


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--check":
        print(autograd_device_logging.check_report())
        s = autograd_device_logging.status()
        return 0 if s.active and not s.disabled_reason else 1
    if argv[0] == "-m":
        if len(argv) < 2:
            print("-m needs a module name", file=sys.stderr)
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    sys.argv = argv
    sys.path.insert(0, __import__("os").path.dirname(argv[0]) or ".")
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
