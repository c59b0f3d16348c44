"""The launcher, `python -m autograd_device_logging`: runs a Python program
with autograd device logging active.

It activates the library (Note [Activation], _activation.py) before the
program can import torch. The program runs as under plain `python`: sys.argv, __main__ and
sys.path[0] are the program's, and its own exceptions keep their traceback
and exit code. The library is not put into the environment (no LD_PRELOAD),
so child processes (compilers started by torch.compile, for example) do not
inherit it. --report DIR sets one variable, AUTOGRAD_DEVICE_LOGGING_REPORT_DIR,
and --measure-threading one, AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING, so
that the children that load the library (the ranks torchrun starts, for
example) write records and measure too.
"""

import argparse
import importlib.util
import os
import runpy
import sys

import autograd_device_logging
from autograd_device_logging import _activation, settings

PROG = "python -m autograd_device_logging"


def make_parser():
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [--check | --version] | report DIR [options] | "
        "[--report DIR] [-m MODULE | [--] SCRIPT] [ARG ...]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Subcommand:\n"
        f"  {PROG} report DIR [--json] [--plot PNG] [--since WHEN] [--until WHEN] [--job NAME]\n"
        "      a table per job of the records in DIR, offline: it loads neither torch nor\n"
        "      the library (`report --help` says more)\n\n"
        "Examples:\n"
        f"  {PROG} train.py --epochs 3\n"
        f"  {PROG} --report /shared/adl train.py\n"
        f"  {PROG} --report /shared/adl --measure-threading train.py\n"
        f"  {PROG} -m torch.distributed.run --nproc-per-node 2 train.py\n"
        f"  {PROG} --check",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="report whether the library is active in this interpreter (library path, "
        "torch versions, events raised); exit status 0 when it is, 1 when not",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {autograd_device_logging.__version__}"
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        help="keep a record of this process (and of its children that load the library) "
        "in DIR, for `report DIR` (sets AUTOGRAD_DEVICE_LOGGING_REPORT_DIR)",
    )
    parser.add_argument(
        "--measure-threading",
        action="store_true",
        help="measure what single-threaded backward would cost this program (and its children "
        "that load the library): pairs of sampled passes with multithreading off and on "
        "(sets AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING=1; its knobs are read from the "
        "environment)",
    )
    parser.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE [ARG ...]",
        help="run a library module as the program, as `python -m MODULE` does; "
        "everything after MODULE is its arguments",
    )
    parser.add_argument(
        "program",
        nargs=argparse.REMAINDER,
        metavar="SCRIPT [ARG ...]",
        help="the script to run and its arguments, passed unchanged "
        "(a `--` before SCRIPT ends this launcher's options)",
    )
    return parser


def launcher_frame(tb):
    name = tb.tb_frame.f_code.co_filename
    return name in (__file__, runpy.__file__) or name.startswith("<frozen runpy")


def run_program(run):
    """Runs the program; its own exception reaches sys.excepthook (exit status
    1) with the frames of this launcher and runpy left out, so that its
    traceback reads as under plain `python`. SystemExit and KeyboardInterrupt
    pass through unchanged."""
    try:
        run()
    except Exception as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None and launcher_frame(tb):
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        return 1
    return 0


def fail(message):
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def run_script(script, args):
    if os.path.isdir(script):
        if not os.path.isfile(os.path.join(script, "__main__.py")):
            return fail(f"can't find '__main__' module in {script!r}")
    else:
        try:
            open(script, "rb").close()
        except OSError as e:
            return fail(
                f"can't open file {os.path.abspath(script)!r}: [Errno {e.errno}] {e.strerror}"
            )
    sys.argv = [script, *args]
    _activation.set_program(script)
    # As `python SCRIPT` does: the script's own directory, symlinks resolved.
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    # Note [The script's path as given]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # runpy sets sys.argv[0] and __file__ to the path it is handed. As given, sys.argv[0] matches `python SCRIPT`;
    # __file__ (and traceback paths) are then that path too, where Python
    # 3.9+ makes __main__.__file__ absolute.
    return run_program(lambda: runpy.run_path(script, run_name="__main__"))


def find_module(name):
    """Why `name` cannot run as a program (None when it can)."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            main = importlib.util.find_spec(name + ".__main__")
            if main is None:
                return f"No module named {name}.__main__; {name!r} is a package and cannot be run"
    except ModuleNotFoundError as e:
        if e.name is not None and name.startswith(e.name):
            return f"No module named {name}"
        raise  # the package's own import failed: its traceback is the answer
    except ValueError as e:  # a relative or empty name
        return f"No module named {name!r} ({e})"
    return None if spec is not None else f"No module named {name}"


def run_module(name, args):
    problem = find_module(name)
    if problem:
        return fail(problem)
    _activation.set_program(f"-m {name}")
    sys.argv = [name, *args]  # runpy puts the module's file in argv[0], like python -m
    return run_program(lambda: runpy.run_module(name, run_name="__main__", alter_sys=True))


def main(argv, end_process: bool = False):
    """The launcher's exit status; with `end_process` (`python -m`), its
    `report` ends the process once the report is out (Note [The command ends
    once the report is out], fleet_report.py)."""
    if argv[:1] == ["report"]:  # a script named "report": `-- report`
        from autograd_device_logging import fleet_report

        return fleet_report.main(argv[1:], prog=f"{PROG} report", end_process=end_process)
    parser = make_parser()
    args = parser.parse_args(argv)
    # Both are read when the library loads, here and in the children that
    # load it.
    if args.report:
        settings.set_now(settings.REPORT_DIR, args.report)
        report_dir = os.fsencode(args.report)
        _activation.call_when_loaded(
            lambda lib: lib.autograd_device_logging_set_report_dir(report_dir)
        )
    if args.measure_threading:
        settings.set_now(settings.MEASURE_THREADING, "1")
    _activation.activate("by the launcher")
    if args.check:
        if args.module is not None or args.program:
            parser.error("--check takes no program")
        print(autograd_device_logging.check_report())
        s = autograd_device_logging.status()
        return 0 if s.active and not s.disabled_reason and not _activation.switched_off() else 1
    if args.module is not None:
        if not args.module:
            parser.error("-m needs a module name")
        return run_module(args.module[0], args.module[1:])
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program given: name a SCRIPT or -m MODULE (--help lists the options)")
    return run_script(program[0], program[1:])
