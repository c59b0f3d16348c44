"""Which torch releases emit the autograd device events themselves?

    python tools/torch_native_events.py [--write docs/torch-versions.md] VERSION...

For each version, downloads the CPython x86-64 Linux wheel from PyPI (pip's
cache makes repeats cheap), reads libtorch_cpu.so out of it and looks for the
two event names. A release whose libtorch contains them logs the events
itself, so this library must not emit them there (builds for torch >= 2.14
classify but leave the logging to torch, on the strength of this check). Also reports whether
Engine::execute calls compute_dependencies through the PLT, which is what
makes interposition possible, and the same for Engine::ready_queue, which
the calling-thread opt-in replaces too (Note [The calling thread from the
root]): every call to it must go through the PLT, none directly.
"""

import argparse
import datetime
import glob
import os
import platform
import re
import subprocess
import sys
import tempfile
import zipfile

import generated_docs

# The file's title, and this tool's section of it.
HEADER = "# Which torch releases need this library\n\n"
MARKER = "torch-native-events"
EVENTS = (b"torch.autograd.multidevice_backward", b"torch.autograd.gpu_cpu_backward")
PLT_CALL = re.compile(
    rb"call\s+[0-9a-f]+ <_ZN5torch8autograd6Engine20compute_dependenciesEPNS0_4NodeERNS0_9GraphTaskEm@plt>"
)
READY_QUEUE = (
    rb"_ZN5torch8autograd6Engine11ready_queueESt10shared_ptrINS0_10ReadyQueueEEN3c106DeviceE"
)
READY_QUEUE_PLT_CALL = re.compile(rb"call\s+[0-9a-f]+ <" + READY_QUEUE + rb"@plt>")
READY_QUEUE_DIRECT_CALL = re.compile(rb"call\s+[0-9a-f]+ <" + READY_QUEUE + rb">")


def check(version, workdir):
    dest = os.path.join(workdir, version)
    os.makedirs(dest, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            dest,
            f"torch=={version}",
        ],
        check=True,
    )
    (wheel,) = glob.glob(os.path.join(dest, "torch-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        lib = z.extract("torch/lib/libtorch_cpu.so", dest)
    data = open(lib, "rb").read()
    has_events = [name.decode() for name in EVENTS if name in data]
    dis = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, check=True
    ).stdout
    plt_calls = len(PLT_CALL.findall(dis))
    ready_queue_calls = (
        len(READY_QUEUE_PLT_CALL.findall(dis)),
        len(READY_QUEUE_DIRECT_CALL.findall(dis)),
    )
    os.remove(lib)
    os.remove(wheel)
    return os.path.basename(wheel), has_events, plt_calls, ready_queue_calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--write")
    parser.add_argument("versions", nargs="+")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for version in args.versions:
            wheel, events, plt_calls, ready_queue_calls = check(version, workdir)
            rows.append((version, wheel, events, plt_calls, ready_queue_calls))
            print(
                f"{version}: events in libtorch_cpu: {', '.join(events) or 'none'}; "
                f"PLT calls to compute_dependencies: {plt_calls}; calls to ready_queue "
                f"through the PLT / direct: {ready_queue_calls[0]} / {ready_queue_calls[1]}",
                flush=True,
            )
    if args.write:
        lines = [
            f"<!-- {MARKER} -->",
            "Written by `python tools/torch_native_events.py --write "
            f"{os.path.relpath(os.path.abspath(args.write), generated_docs.REPO)} "
            f"{' '.join(args.versions)}` on {datetime.date.today()}, commit "
            f"{generated_docs.commit()} ({platform.machine()}, Python "
            f"{platform.python_version()}).",
            "",
            "For each PyPI wheel: does its `libtorch_cpu.so` contain the event names "
            "(then that torch logs them itself), and how many calls to "
            "`Engine::compute_dependencies` go through the PLT (each one is "
            "interposable)? And how many calls to `Engine::ready_queue` go through "
            "the PLT and how many bypass it (the calling-thread opt-in places every "
            "node only where none does: Note [The calling thread from the root])?",
            "",
            "| torch | wheel | events in libtorch_cpu.so | PLT calls to compute_dependencies "
            "| calls to ready_queue: PLT / direct |",
            "| --- | --- | --- | --- | --- |",
        ]
        for version, wheel, events, plt_calls, (via_plt, direct) in rows:
            lines.append(
                f"| {version} | `{wheel}` | {', '.join(events) or 'none'} | {plt_calls} "
                f"| {via_plt} / {direct} |"
            )
        lines += [
            "",
            "The pin in requirements.txt is the newest release without the events. "
            "Builds against the first release with them and later ones classify every pass "
            "as on earlier releases and leave the logging to torch (Note [Where torch logs "
            "the events itself] in `torch/csrc/autograd/device_logging_state.h`).",
            f"<!-- /{MARKER} -->",
        ]
        # tools/torch_matrix.py's section of the same file stays.
        generated_docs.write_section(args.write, MARKER, "\n".join(lines) + "\n", HEADER)


if __name__ == "__main__":
    main()
