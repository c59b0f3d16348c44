# Owner(s): ["module: autograd"]
"""The two ways users install the library, each into a fresh place:

- pip: `pip install --no-build-isolation .` into a fresh venv (which sees the
  already-installed torch through a .pth file, as a venv made with that torch
  would), and a wheel built the same way; then `python -m
  autograd_device_logging --check` there. The wheel requires exactly the torch
  it was built for, and pip refuses it next to another release.
- CMake: `cmake --install` of the build, then examples/cpp_consumer configured
  with find_package(autograd_device_logging) in a fresh build dir, built and
  run.
"""

import ast
import glob
import os
import shutil
import sys
import tempfile
import unittest

from common_device_logging import (
    IN_THE_PIP_BUILD_PROCESS,
    TEST_DIR,
    build_wheel,
    built_with_simdjson,
    fresh_venv,
    new_venv,
    run,
    shared_source,
)
from torch.testing._internal.common_utils import TestCase, run_tests

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_DIR = os.environ.get("AUTOGRAD_DEVICE_LOGGING_BUILD_DIR", os.path.join(REPO, "build"))
TORCH_VERSION = torch.__version__.split("+")[0]


def fake_torch_venv(path, version):
    """A new venv whose only torch is an installed distribution's metadata
    claiming `version`: what pip's resolver reads to decide whether a wheel's
    torch requirement is met, without GBs of another release."""
    python, site = new_venv(path, "--without-pip")
    info = os.path.join(site, f"torch-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    with open(os.path.join(info, "INSTALLER"), "w") as f:
        f.write("pip\n")
    with open(os.path.join(info, "RECORD"), "w") as f:
        f.write("")
    return python


def other_release(version):
    """A torch release other than `version`, of the same 2.x series."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f"{major}.{minor - 1 if minor > 0 else minor + 1}.0"


@IN_THE_PIP_BUILD_PROCESS
class TestPackaging(TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="adl-packaging-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def fresh_venv(self):
        return fresh_venv(os.path.join(self.tmp, "venv"))

    def assert_check_active(self, python, cwd):
        proc = run([python, "-m", "autograd_device_logging", "--check"], cwd=cwd)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(f"built for torch:  {TORCH_VERSION}", proc.stdout)
        self.assertIn(f"running torch:    {TORCH_VERSION}", proc.stdout)
        self.assertIn("active:           yes", proc.stdout)
        return proc.stdout

    def test_every_class_that_pip_builds_shares_one_process(self):
        # Note [One pip build per test run] in test/conftest.py: a class that
        # pip-builds the sources without the mark compiles them once more.
        builders = []
        for path in sorted(glob.glob(os.path.join(TEST_DIR, "test_*.py"))):
            with open(path) as f:
                tree = ast.parse(f.read())
            for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
                names = {node.id for node in ast.walk(cls) if isinstance(node, ast.Name)}
                if names & {"build_wheel", "shared_source"}:
                    builders.append(cls.name)
                    marks = [ast.unparse(d) for d in cls.decorator_list]
                    self.assertIn("IN_THE_PIP_BUILD_PROCESS", marks, f"{path}: {cls.name}")
        self.assertEqual(sorted(builders), ["TestImportHook", "TestPackaging"])

    def test_pip_install_into_a_fresh_venv(self):
        python, site = self.fresh_venv()
        source, env = shared_source()
        proc = run(
            [python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", source],
            env=env,
        )
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        report = self.assert_check_active(python, cwd=self.tmp)
        self.assertIn(f"library:          {os.path.join(site, 'autograd_device_logging')}", report)

    def test_wheel_built_against_the_installed_torch(self):
        proc, wheel = build_wheel()
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIsNotNone(wheel)
        self.assertNotIn("-none-any", wheel)  # a platform wheel: it carries a .so
        python, site = self.fresh_venv()
        proc = run([python, "-m", "pip", "install", "-q", "--no-deps", wheel])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        report = self.assert_check_active(python, cwd=self.tmp)
        # The library that reported itself active is the wheel's copy, in the
        # fresh venv, not the build tree's.
        self.assertIn(f"library:          {os.path.join(site, 'autograd_device_logging')}", report)
        # The wheel carries the report's compiled reading of record files
        # (it needs only Python's headers) and, where the build found
        # simdjson, its compiled decoding of records.
        compiled = ["record_reader.read_files"]
        if built_with_simdjson():
            compiled += ["record_decoder.record_fields", "record_decoder.pairs_values"]
        for name in compiled:
            module, function = name.split(".")
            proc = run(
                [
                    python,
                    "-c",
                    f"from autograd_device_logging import {module}; "
                    f"assert {module}.{function} is not None",
                ],
                cwd=self.tmp,
            )
            self.assertEqual(proc.returncode, 0, name + proc.stdout + proc.stderr)

    def test_wheel_requires_exactly_its_torch(self):
        # Note [A wheel names the one torch it was built for] in setup.py.
        proc, wheel = build_wheel()
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(f"+torch{TORCH_VERSION}-", os.path.basename(wheel))
        wheels = os.path.dirname(wheel)

        def pip_install_into(venv_dir, torch_version):
            python = fake_torch_venv(os.path.join(self.tmp, venv_dir), torch_version)
            # The running pip, installing into that venv (it has none of its own).
            return run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "--python",
                    python,
                    "install",
                    "--no-index",
                    "--find-links",
                    wheels,
                    "--disable-pip-version-check",
                    "autograd_device_logging",
                ]
            )

        # Beside the torch it was built for (any local build of it), pip
        # installs it...
        proc = pip_install_into("same", f"{TORCH_VERSION}+cpu")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        # ...and beside another release, pip refuses it, naming the torch it needs.
        other = other_release(TORCH_VERSION)
        proc = pip_install_into("other", other)
        self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(f"torch=={TORCH_VERSION}", proc.stdout + proc.stderr)

    @unittest.skipIf(shutil.which("cmake") is None, "needs cmake")
    def test_cmake_install_and_find_package(self):
        prefix = os.path.join(self.tmp, "prefix")
        proc = run(["cmake", "--install", BUILD_DIR, "--prefix", prefix])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertTrue(
            os.path.exists(
                os.path.join(
                    prefix,
                    "lib",
                    "cmake",
                    "autograd_device_logging",
                    "autograd_device_loggingConfig.cmake",
                )
            )
        )
        example_build = os.path.join(self.tmp, "example-build")
        torch_dir = os.path.dirname(torch.__file__)
        proc = run(
            [
                "cmake",
                "-S",
                os.path.join(REPO, "examples", "cpp_consumer"),
                "-B",
                example_build,
                f"-DCMAKE_PREFIX_PATH={prefix}",
                f"-DTORCH_DIR={torch_dir}",
                f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            ]
        )
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        proc = run(["cmake", "--build", example_build, "--parallel"])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        proc = run([os.path.join(example_build, "train_step")])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("autograd_device_logging active: yes", proc.stdout)
        self.assertIn(
            f"built for torch {TORCH_VERSION}, running torch {TORCH_VERSION}", proc.stdout
        )
        self.assertIn("backward passes counted: 1 (cpu_only 1)", proc.stdout)
        # The library comes before libtorch_cpu in the program's DT_NEEDED.
        needed = [
            line.split("[")[1].rstrip("]")
            for line in run(
                ["readelf", "-d", os.path.join(example_build, "train_step")]
            ).stdout.splitlines()
            if "(NEEDED)" in line
        ]
        self.assertLess(
            needed.index("libautograd_device_logging.so"), needed.index("libtorch_cpu.so")
        )


if __name__ == "__main__":
    run_tests()
