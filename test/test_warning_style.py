# Owner(s): ["module: autograd"]
"""One warning style (Note [One warning style], _user_warning.py), and a
--check and status() that tell the truth. Fresh processes each."""

import os
import re
import tempfile

from common_device_logging import LIBRARY, require_built, run_child
from torch.testing._internal.common_utils import TestCase, run_tests

PREFIX = "autograd_device_logging: "


def warning_lines(stderr):
    return [l for l in stderr.splitlines() if "autograd_device_logging" in l and l.strip()]


class TestWarningStyle(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def script(self, text):
        path = os.path.join(self.tmp.name, "user_script.py")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_a_python_warning_names_the_users_line(self):
        # Imported after torch: the warning points at the user's import.
        path = self.script("import torch\nimport autograd_device_logging\n")
        result = run_child([path])
        self.assertEqual(result.returncode, 0, result.stderr)
        (line,) = [l for l in result.stderr.splitlines() if "RuntimeWarning" in l]
        self.assertTrue(
            line.startswith(f"{path}:2: RuntimeWarning: {PREFIX}imported after torch"), line
        )
        self.assertNotRegex(result.stderr, r"\.py:0:")

    def test_without_a_users_line_the_warning_is_one_bare_line(self):
        # A program given as a string has no file to point at.
        result = run_child(
            ["-c", "import torch\nimport autograd_device_logging\n"],
        )
        (line,) = warning_lines(result.stderr)
        self.assertTrue(line.startswith(PREFIX + "imported after torch"), line)
        self.assertNotIn("RuntimeWarning", line)

    def test_cxx_and_python_warnings_share_the_prefix(self):
        path = self.script("import autograd_device_logging\nimport torch\n")
        result = run_child(
            [path],
            env_extra={
                "AUTOGRAD_DEVICE_LOGGING_STATS": "maybe",  # the library's (C++) parser
                "AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING": "maybe",  # the package's
            },
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = warning_lines(result.stderr)
        self.assertEqual(len(lines), 2, result.stderr)
        cxx = [l for l in lines if "AUTOGRAD_DEVICE_LOGGING_STATS" in l]
        python = [l for l in lines if "MEASURE_THREADING" in l]
        self.assertEqual(cxx, [PREFIX + cxx[0][len(PREFIX) :]])
        self.assertEqual(len(python), 1)
        self.assertIn(f"{path}:2: RuntimeWarning: {PREFIX}ignoring", python[0])
        self.assertNotRegex(result.stderr, r"\[W\d+ |\(function ")

    def test_check_is_not_active_with_the_switch_off(self):
        result = run_child(
            ["-m", "autograd_device_logging", "--check"],
            env_extra={"AUTOGRAD_DEVICE_LOGGING": "0"},
        )
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertRegex(result.stdout, r"(?m)^active: +no$")
        self.assertRegex(result.stdout, r"(?m)^reason: +AUTOGRAD_DEVICE_LOGGING=0: ")
        result = run_child(["-m", "autograd_device_logging", "--check"])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertRegex(result.stdout, r"(?m)^active: +yes$")

    def test_status_says_why_after_a_late_import(self):
        result = run_child(
            [
                "-c",
                "import torch\nimport autograd_device_logging as a\n"
                "print('REASON', a.status().disabled_reason)\n",
            ]
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        (line,) = [l for l in result.stdout.splitlines() if l.startswith("REASON ")]
        self.assertTrue(re.match(r"REASON imported after torch: libtorch bound", line), line)


if __name__ == "__main__":
    run_tests()
