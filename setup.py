"""Builds libautograd_device_logging.so with CMake against the torch that is
installed in the environment running the build (hence --no-build-isolation),
and ships it inside the autograd_device_logging package:

    pip install --no-build-isolation .
    pip wheel --no-build-isolation --no-deps -w dist .

The library finds libtorch at run time relative to itself
($ORIGIN/../torch/lib), i.e. the torch of the environment it is installed in.
"""

import os
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        # Zero-config activation: site runs this .pth at every interpreter
        # start-up in the environment (python/_autograd_device_logging_hook.py).
        shutil.copy2(os.path.join(ROOT, "python", "autograd_device_logging.pth"), self.build_lib)
        try:
            import torch  # noqa: F401
        except ImportError:
            sys.exit(
                "autograd_device_logging builds against the installed torch: "
                "install torch first and use pip install --no-build-isolation"
            )
        with tempfile.TemporaryDirectory() as build:
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
                    "--parallel",
                    str(os.cpu_count() or 1),
                ]
            )
            target = os.path.join(self.build_lib, "autograd_device_logging")
            os.makedirs(target, exist_ok=True)
            shutil.copy2(
                os.path.join(
                    build, "python", "autograd_device_logging", "libautograd_device_logging.so"
                ),
                target,
            )


try:
    from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """The wheel carries a native library: tag it for this platform."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

    cmdclass = {"build_py": BuildWithCMake, "bdist_wheel": PlatformWheel}
except ImportError:
    cmdclass = {"build_py": BuildWithCMake}

setup(cmdclass=cmdclass)
