# Owner(s): ["module: autograd"]
"""Bad input gets one clear line, never a traceback.

The launcher (python -m autograd_device_logging) behaves like `python`
itself; a library that cannot be loaded never stops the importing program;
the switches in the environment take the values people type. Each case runs
in a fresh interpreter and checks its exit code and its whole stderr.
"""

import json
import os
import signal
import tempfile
import textwrap

from common_device_logging import LIBRARY, PACKAGE_ROOT, require_built, run_child
from torch.testing._internal.common_utils import TestCase, run_tests

LAUNCHER = ["-m", "autograd_device_logging"]
# Quiet children: without torch's API-usage lines, stderr holds only what
# these cases are about.
QUIET = {"PYTORCH_API_USAGE_STDERR": None}

# Prints what a program sees of how it was started.
SHOW_STARTUP = """
import json, os, pickle, sys
import __main__

class Defined:
    pass

print(json.dumps({
    "argv": sys.argv,
    "name": __name__,
    "main_is_this_module": __main__.__dict__ is globals(),
    "main_file": os.path.abspath(__main__.__file__),
    "path": sys.path,
    "pickles": type(pickle.loads(pickle.dumps(Defined()))).__module__,
}))
"""

BACKWARD_AND_STATUS = """
import autograd_device_logging, torch
x = torch.ones(3, requires_grad=True)
(x * 2).sum().backward()
assert torch.equal(x.grad, torch.full((3,), 2.0))
s = autograd_device_logging.status()
print("STATS", autograd_device_logging.device_stats().enabled)
print("REASON", s.disabled_reason)
"""


def plain_python(args, env_extra=None):
    """The same child under plain `python` (the same environment, the
    package's directory on PYTHONPATH included)."""
    return run_child(args, env_extra={**QUIET, **(env_extra or {})})


def stderr_lines(result):
    """The lines on stderr, less the source line that Python's warnings
    print under a warning's own line (indented)."""
    return [l for l in result.stderr.splitlines() if not l.startswith("  ")]


class TestLauncher(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def script(self, name, code):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(code))
        return path

    def assert_one_line(self, result, returncode, *fragments):
        self.assertEqual(result.returncode, returncode, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(len(stderr_lines(result)), 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, result.stderr)

    def test_missing_script_is_one_line_and_exit_2(self):
        missing = os.path.join(self.tmp.name, "nope.py")
        result = run_child([*LAUNCHER, missing], env_extra=QUIET)
        self.assert_one_line(
            result, 2, "python -m autograd_device_logging: can't open file", repr(missing)
        )
        self.assertEqual(plain_python([missing]).returncode, 2)

    def test_missing_module_is_one_line_and_exit_2(self):
        for module in ("nope_mod", "json.nope", "nope_pkg.sub"):
            result = run_child([*LAUNCHER, "-m", module, "arg"], env_extra=QUIET)
            self.assert_one_line(result, 2, f"No module named {module}")

    def test_package_without_main_is_one_line_and_exit_2(self):
        result = run_child([*LAUNCHER, "-m", "json"], env_extra=QUIET)
        self.assert_one_line(result, 2, "'json' is a package and cannot be run")

    def test_no_program_is_a_usage_error(self):
        result = run_child(LAUNCHER, env_extra=QUIET)
        self.assertEqual(result.returncode, 2)
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn("error: no program given", stderr_lines(result)[-1])

    def test_programs_own_exception_keeps_its_traceback_and_exit_code(self):
        path = self.script(
            "raises.py",
            """
            def inner():
                raise ValueError("the program's own error")
            inner()
            """,
        )
        ours = run_child([*LAUNCHER, path], env_extra=QUIET)
        plain = plain_python([path])
        self.assertEqual(ours.returncode, 1)
        self.assertEqual(ours.returncode, plain.returncode)
        # Word for word what python prints: no frames of the launcher or runpy.
        self.assertEqual(ours.stderr, plain.stderr)

    def test_programs_exit_status_passes_through(self):
        path = self.script("exits.py", "import sys\nsys.exit(7)\n")
        self.assertEqual(run_child([*LAUNCHER, path], env_extra=QUIET).returncode, 7)

    def test_program_killed_by_sigint_ends_as_under_python(self):
        # Python keeps SIGINT ignored when it starts with it ignored (as in
        # a background job of a non-interactive shell); the script installs
        # the handler Python installs otherwise.
        path = self.script(
            "sigint.py",
            "import os, signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "os.kill(os.getpid(), signal.SIGINT)\n",
        )
        ours = run_child([*LAUNCHER, path], env_extra=QUIET)
        plain = plain_python([path])
        self.assertEqual(plain.returncode, -signal.SIGINT)
        self.assertEqual(ours.returncode, plain.returncode)
        self.assertIn("KeyboardInterrupt", ours.stderr)

    def test_script_sees_argv_main_and_path_as_under_python(self):
        path = self.script("startup.py", SHOW_STARTUP)
        relative = os.path.relpath(path)
        args = ["--check", "-m", "x y", "--", "-"]
        for script in (path, relative):
            plain = plain_python([script, *args])
            for launcher in ([*LAUNCHER, script, *args], [*LAUNCHER, "--", script, *args]):
                ours = run_child(launcher, env_extra=QUIET)
                self.assertEqual(ours.returncode, 0, ours.stderr)
                self.assertEqual(json.loads(ours.stdout), json.loads(plain.stdout))
        seen = json.loads(plain.stdout)
        self.assertEqual(seen["argv"], [relative, *args])
        self.assertEqual(seen["path"][0], self.tmp.name)
        self.assertEqual(seen["pickles"], "__main__")

    def test_module_sees_argv_and_main_as_under_python(self):
        self.script("startup_mod.py", SHOW_STARTUP)
        env = {**QUIET, "PYTHONPATH": self.tmp.name + os.pathsep + PACKAGE_ROOT}
        ours = run_child([*LAUNCHER, "-m", "startup_mod", "a", "--b"], env_extra=env)
        plain = run_child(["-m", "startup_mod", "a", "--b"], env_extra=env)
        self.assertEqual(ours.returncode, 0, ours.stderr)
        self.assertEqual(json.loads(ours.stdout), json.loads(plain.stdout))
        self.assertEqual(json.loads(ours.stdout)["argv"][1:], ["a", "--b"])

    def test_help_lists_every_option(self):
        result = run_child([*LAUNCHER, "--help"], env_extra=QUIET)
        self.assertEqual(result.returncode, 0)
        for option in ("--check", "--version", "-m", "SCRIPT [ARG ...]", "--help", "--report"):
            self.assertIn(option, result.stdout)
        self.assertIn("report DIR [--json] [--plot PNG]", result.stdout)
        report_help = run_child([*LAUNCHER, "report", "--help"], env_extra=QUIET)
        self.assertEqual(report_help.returncode, 0)
        for option in ("DIR", "--json", "--plot PNG"):
            self.assertIn(option, report_help.stdout)
        version = run_child([*LAUNCHER, "--version"], env_extra=QUIET)
        self.assertRegex(version.stdout, r"^python -m autograd_device_logging \d+\.\d+\.\d+")


class TestLibraryThatCannotLoad(TestCase):
    """AUTOGRAD_DEVICE_LOGGING_LIBRARY naming something that does not load."""

    def check_not_fatal(self, path, cause):
        result = run_child(
            ["-c", BACKWARD_AND_STATUS],
            env_extra={**QUIET, "AUTOGRAD_DEVICE_LOGGING_LIBRARY": path},
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        lines = stderr_lines(result)
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn(f"the library {path} could not be loaded", lines[0])
        self.assertIn(cause, lines[0])
        self.assertIn("Fix: unset AUTOGRAD_DEVICE_LOGGING_LIBRARY or point it at", lines[0])
        self.assertIn(f"REASON the library {path} could not be loaded", result.stdout)
        self.assertIn("STATS False", result.stdout)

    def test_missing_file(self):
        self.check_not_fatal("/nonexistent/libautograd_device_logging.so", "No such file")

    def test_not_a_shared_object(self):
        with tempfile.NamedTemporaryFile("w", suffix=".so") as f:
            f.write("not a library\n" * 100)
            f.flush()
            self.check_not_fatal(f.name, "invalid ELF header")

    def test_another_architecture(self):
        # The built library with its ELF class byte saying 32-bit.
        require_built(self, LIBRARY)
        with open(LIBRARY, "rb") as f:
            image = bytearray(f.read())
        self.assertEqual(image[4], 2)  # ELFCLASS64
        image[4] = 1
        with tempfile.NamedTemporaryFile("wb", suffix=".so") as f:
            f.write(image)
            f.flush()
            self.check_not_fatal(f.name, "wrong ELF class: ELFCLASS32")

    def test_imported_from_a_script_is_still_one_line(self):
        # The library loads at torch's import (Note [Activation]).
        with tempfile.NamedTemporaryFile("w", suffix=".py") as script:
            script.write("import autograd_device_logging\nimport torch\n")
            script.flush()
            result = run_child(
                [script.name],
                env_extra={**QUIET, "AUTOGRAD_DEVICE_LOGGING_LIBRARY": "/nonexistent.so"},
            )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(stderr_lines(result)), 1, result.stderr)

    def test_check_reports_it_and_exits_1(self):
        path = "/nonexistent/libautograd_device_logging.so"
        result = run_child(
            [*LAUNCHER, "--check"],
            env_extra={**QUIET, "AUTOGRAD_DEVICE_LOGGING_LIBRARY": path},
        )
        self.assertEqual(result.returncode, 1)
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn("active:           no", result.stdout)
        self.assertIn(f"disabled: the library {path} could not be loaded", result.stdout)


class TestEnvironmentSwitches(TestCase):
    """AUTOGRAD_DEVICE_LOGGING_STATS, read by the library at load
    (Note [The library's settings are read once, at load], settings.h)."""

    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY)

    def stats_with(self, value):
        result = run_child(
            ["-c", BACKWARD_AND_STATUS],
            env_extra={**QUIET, "AUTOGRAD_DEVICE_LOGGING_STATS": value},
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def test_values_people_type(self):
        for value, enabled in (
            ("1", True),
            ("true", True),
            ("TRUE", True),
            ("Yes", True),
            ("on", True),
            ("0", False),
            ("false", False),
            ("FALSE", False),
            ("No", False),
            ("OFF", False),
            ("", False),
        ):
            result = self.stats_with(value)
            self.assertIn(f"STATS {enabled}", result.stdout, value)
            # While on, the statistics print their summary line at exit.
            summary = [line for line in stderr_lines(result) if "backward passes" in line]
            self.assertEqual(len(stderr_lines(result)), len(summary), result.stderr)

    def test_anything_else_is_one_warning_and_the_default(self):
        for value in ("ye", "2", "enable"):
            result = self.stats_with(value)
            self.assertIn("STATS False", result.stdout)
            self.assertNotIn("Traceback", result.stderr)
            lines = stderr_lines(result)
            self.assertEqual(len(lines), 1, result.stderr)
            self.assertIn(f"ignoring AUTOGRAD_DEVICE_LOGGING_STATS={value}:", lines[0])
            self.assertIn("use 1, true, yes or on, or 0, false, no or off", lines[0])
            self.assertIn("using the default, off.", lines[0])

    def test_the_old_name_works_with_one_deprecation_warning(self):
        # Note [The library's settings are read once, at load] (settings.h).
        for env, enabled, tail in (
            ({"PYTORCH_AUTOGRAD_DEVICE_STATS": "1"}, True, "(the same values)."),
            (
                {"PYTORCH_AUTOGRAD_DEVICE_STATS": "1", "AUTOGRAD_DEVICE_LOGGING_STATS": "0"},
                False,
                "which is set too and wins.",
            ),
            (
                {"PYTORCH_AUTOGRAD_DEVICE_STATS": "0", "AUTOGRAD_DEVICE_LOGGING_STATS": "yes"},
                True,
                "which is set too and wins.",
            ),
        ):
            result = run_child(["-c", BACKWARD_AND_STATUS], env_extra={**QUIET, **env})
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn(f"STATS {enabled}", result.stdout, env)
            lines = [line for line in stderr_lines(result) if "backward passes" not in line]
            self.assertEqual(len(lines), 1, result.stderr)
            self.assertIn(
                "PYTORCH_AUTOGRAD_DEVICE_STATS is deprecated: use AUTOGRAD_DEVICE_LOGGING_STATS",
                lines[0],
            )
            self.assertIn(tail, lines[0])


if __name__ == "__main__":
    run_tests()
