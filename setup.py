"""Builds libautograd_device_logging.so with CMake against the torch that is
installed in the environment running the build (hence --no-build-isolation),
and ships it inside the autograd_device_logging package:

    pip install --no-build-isolation .
    pip wheel --no-build-isolation --no-deps -w dist .

The library finds libtorch at run time relative to itself
($ORIGIN/../torch/lib), i.e. the torch of the environment it is installed in.

Note [A wheel names the one torch it was built for]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The library links against one torch release's C++ ABI and is refused by the
dynamic linker next to any other, so its wheel says so in its metadata: it
requires exactly that release (torch==X.Y.Z, which any local build of it, such
as +cu130, satisfies) and its version carries a local tag naming it
(0.1.0+torch2.4.1). pip then refuses a wheel for another torch, instead of
installing a library that can only disable itself.
"""

import contextlib
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def installed_torch_release():
    """The installed torch's release, without its local tag (2.4.1+cu121 -> 2.4.1)."""
    try:
        import torch
    except ImportError:
        sys.exit(
            "autograd_device_logging builds against the installed torch: "
            "install torch first and use pip install --no-build-isolation"
        )
    return torch.__version__.split("+")[0]


def package_version():
    """The package's __version__, the one place it is written (CMake reads it too)."""
    with open(os.path.join(ROOT, "python", "autograd_device_logging", "__init__.py")) as f:
        return re.search(r'^__version__ = "([0-9.]+)"$', f.read(), re.M).group(1)


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        # Zero-config activation: site runs this .pth at every interpreter
        # start-up in the environment (Note [The import hook costs a process
        # without torch one line], python/autograd_device_logging/_activation.py).
        shutil.copy2(os.path.join(ROOT, "python", "autograd_device_logging.pth"), self.build_lib)
        # $AUTOGRAD_DEVICE_LOGGING_WHEEL_BUILD_DIR keeps the CMake build
        # between builds of the same source folder (the tests' pip builds share
        # one); by default it is a temporary folder.
        kept = os.environ.get("AUTOGRAD_DEVICE_LOGGING_WHEEL_BUILD_DIR")
        with contextlib.nullcontext(kept) if kept else tempfile.TemporaryDirectory() as build:
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(
                [
                    "cmake",
                    "-S",
                    ROOT,
                    "-B",
                    build,
                    *generator,
                    f"-DPython3_EXECUTABLE={sys.executable}",
                    "-DCMAKE_BUILD_TYPE=Release",
                    "-DAUTOGRAD_DEVICE_LOGGING_BUILD_TESTS=OFF",
                    "-DAUTOGRAD_DEVICE_LOGGING_WHEEL=ON",
                ]
            )
            subprocess.check_call(
                [
                    "cmake",
                    "--build",
                    build,
                    "--target",
                    "autograd_device_logging_library",
                    "autograd_device_logging_python",
                    "--parallel",
                    str(os.cpu_count() or 1),
                ]
            )
            target = os.path.join(self.build_lib, "autograd_device_logging")
            os.makedirs(target, exist_ok=True)
            built = os.path.join(build, "python", "autograd_device_logging")
            shutil.copy2(os.path.join(built, "libautograd_device_logging.so"), target)
            # The report's compiled reading of record files (Note [Reading
            # the files in compiled code], record_reader.py) and, where the
            # build found simdjson, of the measured pairs (Note [The pairs'
            # values in compiled code], record_decoder.py).
            for module in ("_record_files", "_record_decoding"):
                for extension in glob.glob(os.path.join(built, f"{module}.*.so")):
                    shutil.copy2(extension, target)


try:
    try:
        from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """The wheel carries a native library: tag it for this platform."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

    cmdclass = {"build_py": BuildWithCMake, "bdist_wheel": PlatformWheel}
except ImportError:
    cmdclass = {"build_py": BuildWithCMake}

# Note [A wheel names the one torch it was built for]
TORCH_RELEASE = installed_torch_release()
setup(
    version=f"{package_version()}+torch{TORCH_RELEASE}",
    install_requires=[f"torch=={TORCH_RELEASE}"],
    # AUTOGRAD_DEVICE_LOGGING_OTLP=1 (Note [Pushing the counts over OTLP],
    # otlp_export.py) and the report's --prometheus FILE.
    extras_require={
        "otlp": ["opentelemetry-sdk>=1.20", "opentelemetry-exporter-otlp-proto-http>=1.20"],
        "prometheus": ["prometheus-client>=0.17"],
    },
    cmdclass=cmdclass,
)
