# Owner(s): ["module: autograd"]
"""The .pth cannot break `import torch` (Note [The .pth cannot break import
torch], python/_autograd_device_logging_hook.py): with the hook module or the
package missing, unreadable or broken, `import torch` succeeds with at most
one warning, also where warnings are errors.

Each case is a site directory made here, holding the .pth as it ships and
whatever else the case leaves of an installation, processed by
site.addsitedir() in a fresh interpreter that then imports torch.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from torch.testing._internal.common_utils import TestCase, run_tests

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TEST_DIR)
sys.path.insert(0, TEST_DIR)

from test_autograd_device_logging import LIBRARY, PACKAGE_ROOT, require_built  # noqa: E402

PTH = os.path.join(REPO, "python", "autograd_device_logging.pth")
HOOK = os.path.join(REPO, "python", "_autograd_device_logging_hook.py")
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

    def add_hook(self, text=None):
        if text is None:
            shutil.copy(HOOK, self.site)
        else:
            with open(os.path.join(self.site, "_autograd_device_logging_hook.py"), "w") as f:
                f.write(text)

    def add_package(self, init_text):
        package = os.path.join(self.site, "autograd_device_logging")
        os.makedirs(package)
        with open(os.path.join(package, "__init__.py"), "w") as f:
            f.write(init_text)

    def import_torch(self, *python_flags, pythonpath=None):
        env = dict(os.environ)
        for name in ("PYTHONPATH", "LD_PRELOAD", "AUTOGRAD_DEVICE_LOGGING", "PYTHONWARNINGS"):
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

    def assert_one_warning(self, proc, *expected):
        lines = [line for line in proc.stderr.splitlines() if "autograd_device_logging" in line]
        self.assertEqual(len(lines), 1, proc.stderr)
        for text in expected:
            self.assertIn(text, lines[0])
        self.assertIn("IMPORTED False", proc.stdout)

    def test_hook_module_missing(self):
        proc = self.import_torch()
        self.assert_one_warning(
            proc, "ModuleNotFoundError", "_autograd_device_logging_hook", "not logged"
        )

    def test_hook_module_with_a_syntax_error(self):
        self.add_hook("def load_before_torch(:\n")
        self.assert_one_warning(self.import_torch(), "SyntaxError")

    def test_hook_module_that_raises(self):
        self.add_hook("raise RuntimeError('half-copied image')\n")
        self.assert_one_warning(self.import_torch(), "RuntimeError", "half-copied image")

    def test_package_missing(self):
        self.add_hook()
        self.assert_one_warning(
            self.import_torch(), "ModuleNotFoundError", "'autograd_device_logging'"
        )

    def test_package_with_a_syntax_error(self):
        self.add_hook()
        self.add_package("def broken(:\n")
        self.assert_one_warning(self.import_torch(), "SyntaxError")

    def test_package_that_raises(self):
        self.add_hook()
        self.add_package("raise ImportError('its library was removed')\n")
        self.assert_one_warning(self.import_torch(), "ImportError", "its library was removed")

    def test_warnings_as_errors(self):
        # -W error turns the warning into an exception: still one line, and
        # torch imports.
        for hook in (False, True):
            with self.subTest(hook_module_present=hook):
                if hook:
                    self.add_hook()
                self.assert_one_warning(self.import_torch("-W", "error"), "ModuleNotFoundError")

    def test_a_whole_installation_loads_the_library(self):
        # The guard changes nothing when everything is there.
        require_built(self, LIBRARY)
        self.add_hook()
        proc = self.import_torch(pythonpath=PACKAGE_ROOT)
        self.assertIn("IMPORTED True", proc.stdout)
        self.assertEqual(
            [line for line in proc.stderr.splitlines() if "autograd_device_logging" in line], []
        )


if __name__ == "__main__":
    run_tests()
