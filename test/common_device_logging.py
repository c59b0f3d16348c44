# Owner(s): ["module: autograd"]
"""What the test modules share: where the build is, how a child process is
run and read, the record's schema and the report's modules, and the pip
helpers. The one module the test modules import from each other's domain;
pytest and `python test/test_x.py` both find it next to them, so no test
changes sys.path.
"""

import atexit
import functools
import glob
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import types
import unittest
import uuid

import jsonschema
import pytest

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BUILD_DIR = os.environ.get("AUTOGRAD_DEVICE_LOGGING_BUILD_DIR", os.path.join(REPO, "build"))

PACKAGE_ROOT = os.path.join(BUILD_DIR, "python")

LIBRARY = os.path.join(PACKAGE_ROOT, "autograd_device_logging", "libautograd_device_logging.so")

EVENTS = ("torch.autograd.multidevice_backward", "torch.autograd.gpu_cpu_backward")

# Note [Where torch logs the events itself] (C++): builds against torch 2.14
# or later classify as on earlier releases but leave the logging to torch,
# which logs the events whatever this library does. Only the cases about
# what is logged without this library (stock torch, the off switch, a
# library that is disabled or cannot load) have nothing of the library's to
# check there (Note [The events' tests where torch logs them itself], C++).
TORCH_LOGS_EVENTS = torch.torch_version.TorchVersion(torch.__version__) >= "2.14"


skip_where_torch_logs_events = unittest.skipIf(
    TORCH_LOGS_EVENTS,
    "torch >= 2.14 logs the events itself, with or without this library: what is "
    "logged without it is not this library's to check there",
)

# Set by `tools/run_sanitizers.sh address` to the ASan runtime, which has to
# come first in every child that loads the instrumented library.
SANITIZER_PRELOAD = os.environ.get("AUTOGRAD_DEVICE_LOGGING_TEST_PRELOAD", "")


def autograd_events(stderr):
    """The autograd device events a child printed, in order."""
    return [
        line.split()[1]
        for line in stderr.splitlines()
        if line.startswith("PYTORCH_API_USAGE torch.autograd.") and line.split()[1] in EVENTS
    ]


def built_with_simdjson() -> bool:
    """Whether the build under test found simdjson and zlib, so that it has the
    report's compiled reading of the measured pairs (Note [The pairs' values
    in compiled code], record_decoder.py): found, and not sanitized."""
    with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
        cache = f.read()
    found = [
        re.search(rf"^{name}:PATH=(.*)$", cache, re.M)
        for name in ("simdjson_DIR", "ZLIB_INCLUDE_DIR")
    ]
    sanitized = re.search(r"^AUTOGRAD_DEVICE_LOGGING_SANITIZER:STRING=(.+)$", cache, re.M)
    return all(f and not f.group(1).endswith("-NOTFOUND") for f in found) and not sanitized


def built_unsanitized() -> bool:
    """Whether the build under test is not sanitized, so that it has the
    report's compiled reading of record files (Note [Reading the files in
    compiled code], record_reader.py), which needs only Python's headers."""
    with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
        cache = f.read()
    return not re.search(r"^AUTOGRAD_DEVICE_LOGGING_SANITIZER:STRING=(.+)$", cache, re.M)


def require_built(test, *paths):
    for path in paths:
        if not os.path.exists(path):
            test.fail(f"{path} is missing: build the project first (README)")


class ChildResult:
    def __init__(self, proc):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.events = autograd_events(proc.stderr)
        self.status = None
        for line in proc.stdout.splitlines():
            if line.startswith("STATUS "):
                self.status = json.loads(line[len("STATUS ") :])


def program_job(program, host):
    """The job of `program` on `host` where nothing job-wide names one (Note
    [No path in a job's name], process_identity.h): a path's file name and a
    hash (FNV-1a, 32 bits) of the whole path; "-m MODULE" and "-c" as they
    are."""
    if "/" not in program:
        return f"{program}@{host}"
    h = 2166136261
    for byte in program.encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return f"{program.rsplit('/', 1)[1]}-{h:08x}@{host}"


def run_child(args, env_extra=None, with_package=True, stdin_code=None):
    env = dict(os.environ)
    env["PYTORCH_API_USAGE_STDERR"] = "1"
    env.pop("LD_PRELOAD", None)
    env.pop("AUTOGRAD_DEVICE_LOGGING_LIBRARY", None)
    env.pop("AUTOGRAD_DEVICE_LOGGING_PROGRAM", None)
    if with_package:
        env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    for key, value in (env_extra or {}).items():
        if value is None:
            env.pop(key, None)  # unset, not empty
        else:
            env[key] = value
    if SANITIZER_PRELOAD:
        env["LD_PRELOAD"] = ":".join(filter(None, (SANITIZER_PRELOAD, env.get("LD_PRELOAD"))))
    return ChildResult(run_python(args, env, stdin_code=stdin_code))


def run_python(args, env, stdin_code=None, wait=True):
    """`python ARGS` in a fresh process with exactly `env`, its output as
    text: the one way the tests start a child. With wait=False, the running
    Popen (its output piped)."""
    if not wait:
        return subprocess.Popen(
            [sys.executable, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        input=stdin_code,
        capture_output=True,
        text=True,
        timeout=300,
    )


# Note [Children skip interpreter finalization]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Stock PyTorch can abort at interpreter exit ("terminate called without an
# active exception"; seen with and without this library on the test
# accelerator). A backward pass returns to its caller as soon as its last
# node ran, and an autograd device thread that ran nodes of it may drop its
# reference to the GraphTask a moment later. When that is the last one, the
# GraphTask's ThreadLocalState releases a Python object it captured, which
# takes the GIL. If the interpreter is finalizing by then, Python ends the
# thread with pthread_exit, whose unwinding reaches a noexcept frame:
# std::terminate. A core dump of a test child showed exactly that stack,
# from Engine::thread_main through ~ThreadLocalState to take_gil, while the
# main thread was in Py_FinalizeEx. Children therefore flush and leave with
# os._exit, so that a test's verdict is about the backward passes, not that
# race; a child that must exit normally first waits until every device
# thread is idle (DEVICE_THREADS_IDLE below).
EXIT_NOW = (
    "\nimport os as _os, sys as _sys\n_sys.stdout.flush(); _sys.stderr.flush(); _os._exit(0)\n"
)


def run_code(code, **kwargs):
    return run_child(["-c", textwrap.dedent(code) + EXIT_NOW], **kwargs)


TEST_DIR = os.path.dirname(os.path.abspath(__file__))

ACCELERATOR_LIBRARY = os.path.join(BUILD_DIR, "test", "libautograd_test_accelerator.so")

# Child prologue: the library first, then torch and the test accelerator.
# How soon after the first pass, an event or a measured pair the record is on
# disk (kRecordOnDiskWithin, Note [The record is written off the backward
# path], record_writer.h), and how long exit waits for it at most
# (kRecordWriteWaitLimit).
RECORD_ON_DISK_WITHIN_S = 1.0

RECORD_WRITE_WAIT_LIMIT_S = 2.0

# One line of a child program that imports test/autograd_test_accelerator.py
# from its file, since a child may run isolated (python -I ignores
# PYTHONPATH): children never change their sys.path.
IMPORT_TEST_ACCELERATOR = (
    "import importlib.util as _util; "
    "_spec = _util.spec_from_file_location("
    f"'autograd_test_accelerator', {os.path.join(TEST_DIR, 'autograd_test_accelerator.py')!r}); "
    "autograd_test_accelerator = _util.module_from_spec(_spec); "
    "_spec.loader.exec_module(autograd_test_accelerator)"
)

WITH_TEST_ACCELERATOR = f"""
import autograd_device_logging, sys
import jsonschema
import torch
{IMPORT_TEST_ACCELERATOR}
d0, d1 = autograd_test_accelerator.load()
"""


# The last lines of a child that must exit normally (for the library's exit
# write, or Python's atexit): they wait until torch's autograd device threads
# are idle, parked on their queues' futex (Note [Children skip interpreter
# finalization]).
DEVICE_THREADS_IDLE = """
import os as _os, platform as _platform, time as _time
from torch.torch_version import TorchVersion as _TorchVersion
_FUTEX = {"x86_64": 202, "aarch64": 98}.get(_platform.machine())
def _syscall_of(tid):
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            return f.read().split()
    except OSError:
        return None
_see_syscalls = _FUTEX is not None and _syscall_of(_os.getpid()) is not None
def _device_threads():
    found = {}
    for tid in _os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                found[f.read().strip()] = tid
        except OSError:
            pass
    return found
def _waits_for_work(tid):
    if not _see_syscalls:
        return True
    fields = _syscall_of(tid)
    return (
        fields is not None
        and len(fields) > 4
        and fields[0] == str(_FUTEX)
        and int(fields[2], 16) & 0x7F == 9
        and int(fields[4], 16) == 0
    )
_wanted = {f"pt_autograd_{i}" for i in range(max(2, torch.cuda.device_count()))}
if _TorchVersion(torch.__version__) < "2.3":
    _wanted = set()
_deadline = _time.monotonic() + 30
_idle_readings = 0
while _idle_readings < 3 and _time.monotonic() < _deadline:
    _threads = _device_threads()
    if _wanted <= set(_threads) and all(_waits_for_work(_threads[n]) for n in _wanted):
        _idle_readings += 1
    else:
        _idle_readings = 0
    _time.sleep(0.01)
"""


RECORD_SCHEMA_PATH = os.path.join(os.path.dirname(TEST_DIR), "schema", "process_record.schema.json")


with open(RECORD_SCHEMA_PATH) as _f:
    RECORD_SCHEMA = json.load(_f)


def synthetic_record(**fields):
    """A valid record of schema 2.0 (what the library writes), with `fields`
    replacing its own."""
    record = {
        "schema": "2.0",
        "time": "2026-12-01T10:00:00Z",
        "start_time": "2026-12-01T09:00:00Z",
        "written_at": "exit",
        "host": "h",
        "pid": 1,
        "program": "train.py",
        "job": "j",
        "job_source": "AUTOGRAD_DEVICE_LOGGING_JOB",
        "role": "other",
        "rank": None,
        "local_rank": None,
        "world_size": None,
        "torch": {"built_for": "2.13.0", "running": "2.13.0"},
        "library_version": "0.1.0",
        "activated_by": "on torch import",
        "accelerators": {"cuda": 2},
        "events": [],
        "events_logged_by": "library",
        "ran_backward": True,
        "passes_classified": 3,
        "pass_classes": None,
        "disabled_reason": None,
    }
    record.update(fields)
    return record


def known_values_outside_the_schema(record):
    """The values of `record`'s enumerated fields that the schema does not
    list as known. Readers accept any string there (a newer minor version may
    add values: Note [A newer minor version adds fields and values]), so this
    is what holds the library, which writes the current version, to the
    schema's vocabulary."""
    properties = RECORD_SCHEMA["properties"]
    outside = []

    def check(where, value, known):
        if value not in known:
            outside.append(f"{where}={value!r}")

    for field in ("written_at", "job_source", "role", "events_logged_by"):
        if field in record:
            check(field, record[field], properties[field]["examples"])
    for event in record.get("events", []):
        check("events", event, properties["events"]["items"]["examples"])
    classes = properties["pass_classes"]["anyOf"][0]["required"]
    for device_class in record.get("pass_classes") or {}:
        check("pass_classes", device_class, classes)
    for device_class in (record.get("threading_cost") or {}).get("pairs", {}):
        check("threading_cost.pairs", device_class, classes)
    return outside


def only_record(test, directory):
    """The one record in `directory`, checked against the schema, every
    enumerated value among the schema's known ones."""
    names = [n for n in os.listdir(directory) if n.endswith(".json")]
    test.assertEqual(len(names), 1, names)
    with open(os.path.join(directory, names[0])) as f:
        record = json.load(f)
    jsonschema.validate(record, RECORD_SCHEMA)
    test.assertEqual(known_values_outside_the_schema(record), [])
    return record


REPORT_MODULES = (
    "record_fields",
    "record_decoder",
    "file_index",
    "record_reader",
    "fleet_totals",
    "cost_statistics",
    "report_text",
    "report_plot",
    "report_cache",
    "fleet_report",
)


def report_modules():
    """The report's modules, by name, imported under a stand-in for the
    package that shares its directory but never runs its __init__ (which,
    in a process that imported torch, would load the library)."""
    name = "adl_report_only"
    package = sys.modules.get(name)
    if package is None:
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(PACKAGE_ROOT, "autograd_device_logging")]
        sys.modules[name] = package
    return types.SimpleNamespace(
        **{m: importlib.import_module(f"{name}.{m}") for m in REPORT_MODULES}
    )


# The environment that names a process's job or its OTLP service
# (Note [Which job a process belongs to], process_identity.cpp).
JOB_NAMING = (
    "AUTOGRAD_DEVICE_LOGGING_JOB",
    "TORCHELASTIC_RUN_ID",
    "GROUP_WORLD_SIZE",
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "PBS_JOBID",
    "LSB_JOBID",
    "LSB_JOBINDEX",
    "KUBERNETES_JOB_NAME",
    "RANK",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)


def one_node_torchrun():
    """torchrun's arguments for one node of ranks, as ``--standalone`` means
    them: the c10d rendezvous and a run id drawn at random (a uuid4, which
    Note [Which job a process belongs to] names a job by what follows). The
    endpoint is a free port: older torch's ``--standalone`` (2.0.1's) binds
    port 29400, so two launches at once (pytest-xdist's workers) collide."""
    return [
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:0",
        f"--rdzv-id={uuid.uuid4()}",
        "--nnodes=1",
    ]


# The fleet report's cache folder for the children of this test process
# (Note [The report's cache]): its own, so that no test writes the user's.
REPORT_CACHE_HOME = tempfile.mkdtemp(prefix="adl-test-cache-")
atexit.register(shutil.rmtree, REPORT_CACHE_HOME, ignore_errors=True)


def child_env(report_dir, **extra):
    env = dict(os.environ)
    for name in (
        "LD_PRELOAD",
        "AUTOGRAD_DEVICE_LOGGING_LIBRARY",
        "AUTOGRAD_DEVICE_LOGGING_STATS",
        "PYTORCH_AUTOGRAD_DEVICE_STATS",
        # A test process that loaded the library set it (Note [A child joins
        # the job of the program that started it]); each child is a job's
        # first process.
        "AUTOGRAD_DEVICE_LOGGING_PROGRAM",
        # What names a job or a service: each child names its own.
        *JOB_NAMING,
    ):
        env.pop(name, None)
    env.update(
        PYTHONPATH=PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=BUILD_DIR,
        AUTOGRAD_DEVICE_LOGGING_REPORT_DIR=report_dir,
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
        XDG_CACHE_HOME=REPORT_CACHE_HOME,
    )
    env.update(extra)
    return env


# Another C++ runtime: libstdc++ linked in statically and exported.
OTHER_RUNTIME_LIBRARY = os.path.join(BUILD_DIR, "test", "libadl_test_other_cxx_runtime.so")


def copy_of_sources(dest):
    """The project's sources without build outputs or VCS data. pip builds a
    local project in place (setuptools writes build/ and *.egg-info/ there),
    so every pip test builds from such a copy and never writes into the
    checkout."""
    shutil.copytree(
        REPO,
        dest,
        ignore=shutil.ignore_patterns(
            ".git",
            "build",
            "build-*",
            "*.egg-info",
            "__pycache__",
            ".venv",
            ".whl",
            "wheelhouse",
        ),
    )
    return dest


def run(cmd, **kwargs):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("AUTOGRAD_DEVICE_LOGGING_LIBRARY", None)
    env.update(kwargs.pop("env", {}))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, **kwargs)


def new_venv(path, *options):
    """python -m venv; returns (python, site-packages) of the new venv."""
    proc = run([sys.executable, "-m", "venv", *options, path])
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    python = os.path.join(path, "bin", "python")
    site = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    return python, site


def fresh_venv(path):
    """A new venv at `path` that sees the torch (and build tools) of the
    environment running the tests through a .pth file, as a venv made with
    that torch would. Returns (python, site-packages)."""
    python, site = new_venv(path)
    with open(os.path.join(site, "installed_torch.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    # Let the build use that environment's setuptools, not the venv's seed.
    run([python, "-m", "pip", "uninstall", "-q", "-y", "setuptools"])
    return python, site


# The mark of a test class that pip-builds the sources: such classes share
# one test process, so that the build below happens once per run (Note [One
# pip build per test run] in test/conftest.py).
IN_THE_PIP_BUILD_PROCESS = pytest.mark.xdist_group("pip-build")


@functools.lru_cache(maxsize=None)
def shared_source():
    """One copy of the sources per test process, and the environment under
    which every pip build of it keeps one CMake build folder, so that only
    the first of the tests' pip builds compiles. Both are removed at exit."""
    tmp = tempfile.mkdtemp(prefix="adl-pip-source-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    source = copy_of_sources(os.path.join(tmp, "source"))
    return source, {"AUTOGRAD_DEVICE_LOGGING_WHEEL_BUILD_DIR": os.path.join(tmp, "cmake-build")}


@functools.lru_cache(maxsize=None)
def build_wheel():
    """pip wheel --no-build-isolation of the shared copy of the sources;
    (proc, wheel). Built once per test process (the test files that install
    it share it)."""
    source, env = shared_source()
    wheels = os.path.join(os.path.dirname(source), "wheels")
    proc = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            wheels,
            source,
        ],
        env=env,
    )
    found = glob.glob(os.path.join(wheels, "autograd_device_logging-*.whl"))
    return proc, (found[0] if len(found) == 1 else None)
