# Owner(s): ["module: autograd"]
"""The .pth cannot break `import torch` (Note [The .pth cannot break import
torch], python/autograd_device_logging/_activation.py): with the package or
its activation module missing, unreadable or broken, `import torch` succeeds
with at most one warning, also where warnings are errors.

Each case is a site directory made here, holding the .pth as it ships and
whatever else the case leaves of an installation, processed by
site.addsitedir() in a fresh interpreter that then imports torch.
"""

import os
import shutil
import subprocess
import sys
import tempfile

from torch.testing._internal.common_utils import TestCase, run_tests

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TEST_DIR)

from common_device_logging import LIBRARY, PACKAGE_ROOT, require_built

PTH = os.path.join(REPO, "python", "autograd_device_logging.pth")
PROGRAM = """
import site, sys
site.addsitedir(sys.argv[1])
import torch
x = torch.ones(2, requires_grad=True)
(x * 2).sum().backward()
assert torch.equal(x.grad, torch.full((2,), 2.0))
print("IMPORTED", "autograd_device_logging" in sys.modules)
"""


class TestPthGuard(TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.site = os.path.join(self.tmp.name, "site-packages")
        os.makedirs(self.site)
        shutil.copy(PTH, self.site)

    def add_package(self, init_text, activation_text=None):
        package = os.path.join(self.site, "autograd_device_logging")
        os.makedirs(package)
        with open(os.path.join(package, "__init__.py"), "w") as f:
            f.write(init_text)
        if activation_text is not None:
            with open(os.path.join(package, "_activation.py"), "w") as f:
                f.write(activation_text)

    def import_torch(self, *python_flags, pythonpath=None):
        env = dict(os.environ)
        for name in (
            "PYTHONPATH",
            "LD_PRELOAD",
            "AUTOGRAD_DEVICE_LOGGING",
            "PYTHONWARNINGS",
            "AUTOGRAD_DEVICE_LOGGING_PROGRAM",
        ):
            env.pop(name, None)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        env["CUDA_VISIBLE_DEVICES"] = ""
        proc = subprocess.run(
            [sys.executable, *python_flags, "-c", PROGRAM, self.site],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.tmp.name,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("IMPORTED", proc.stdout, proc.stderr)
        return proc

    def assert_one_warning(self, proc, *expected, package_imported=False):
        lines = [line for line in proc.stderr.splitlines() if "autograd_device_logging" in line]
        self.assertEqual(len(lines), 1, proc.stderr)
        for text in expected:
            self.assertIn(text, lines[0])
        self.assertIn(f"IMPORTED {package_imported}", proc.stdout)

    def test_package_missing(self):
        self.assert_one_warning(
            self.import_torch(), "ModuleNotFoundError", "'autograd_device_logging'", "not logged"
        )

    def test_package_with_a_syntax_error(self):
        self.add_package("def broken(:\n")
        self.assert_one_warning(self.import_torch(), "SyntaxError")

    def test_package_that_raises(self):
        self.add_package("raise ImportError('its library was removed')\n")
        self.assert_one_warning(self.import_torch(), "ImportError", "its library was removed")

    def test_activation_module_missing(self):
        self.add_package("")
        self.assert_one_warning(
            self.import_torch(),
            "ModuleNotFoundError",
            "autograd_device_logging._activation",
            package_imported=True,
        )

    def test_activation_module_with_a_syntax_error(self):
        self.add_package("", "def activate(:\n")
        self.assert_one_warning(self.import_torch(), "SyntaxError", package_imported=True)

    def test_activation_that_raises(self):
        self.add_package("", "def activate(how):\n    raise RuntimeError('half-copied image')\n")
        self.assert_one_warning(
            self.import_torch(), "RuntimeError", "half-copied image", package_imported=True
        )

    def test_warnings_as_errors(self):
        # -W error turns the warning into an exception: still one line, and
        # torch imports.
        for broken in (False, True):
            with self.subTest(package_present_but_broken=broken):
                if broken:
                    self.add_package("")
                self.assert_one_warning(
                    self.import_torch("-W", "error"),
                    "ModuleNotFoundError",
                    package_imported=broken,
                )

    def test_a_whole_installation_loads_the_library(self):
        # The guard changes nothing when everything is there.
        require_built(self, LIBRARY)
        proc = self.import_torch(pythonpath=PACKAGE_ROOT)
        self.assertIn("IMPORTED True", proc.stdout)
        self.assertEqual(
            [line for line in proc.stderr.splitlines() if "autograd_device_logging" in line], []
        )


if __name__ == "__main__":
    run_tests()
