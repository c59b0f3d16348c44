# Owner(s): ["module: autograd"]
"""Zero-config activation: pip install, and every process that imports torch
logs its backward passes.

The wheel is built once (from a copy of the sources) and installed into fresh
venvs that see the installed torch; every program here is unmodified: it
imports torch first and never imports autograd_device_logging itself, unless
the case is about doing so.
"""

import glob
import os
import shutil
import subprocess
import tempfile
import textwrap

from common_device_logging import (
    ACCELERATOR_LIBRARY,
    BUILD_DIR,
    EVENTS,
    IMPORT_TEST_ACCELERATOR,
    IN_THE_PIP_BUILD_PROCESS,
    LIBRARY,
    OTHER_RUNTIME_LIBRARY,
    TORCH_LOGS_EVENTS,
    autograd_events,
    build_wheel,
    fresh_venv,
    one_node_torchrun,
    skip_where_torch_logs_events,
)
from torch.testing._internal.common_utils import TestCase, run_tests

# An unmodified training step on the test accelerator: torch first, and
# nothing of this package, then what the process has mapped and how the
# library came in (read through the package, already imported by then).
TORCH_FIRST_SCRIPT = f"""
import sys
sys.dont_write_bytecode = True  # python -I ignores PYTHONDONTWRITEBYTECODE
import torch
{IMPORT_TEST_ACCELERATOR}

d0, d1 = autograd_test_accelerator.load()
a = torch.ones(4, requires_grad=True)
((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward()
assert torch.equal(a.grad, torch.full((4,), 5.0))
"""

REPORT = """
import sys
maps = open("/proc/self/maps").read()
print("COPIES", len({line.split()[-1] for line in maps.splitlines()
                     if line.endswith("libautograd_device_logging.so")}))
print("LIBTORCH", "libtorch_cpu.so" in maps)
print("PACKAGE", "autograd_device_logging" in sys.modules)
if "autograd_device_logging" in sys.modules:
    print("ACTIVATED", sys.modules["autograd_device_logging"].status().activated_by)
sys.stdout.flush(); sys.stderr.flush()
import os; os._exit(0)
"""


@IN_THE_PIP_BUILD_PROCESS
class TestImportHook(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="adl-import-hook-")
        proc, cls.wheel = build_wheel()
        if cls.wheel is None:
            raise RuntimeError(f"pip wheel failed:\n{proc.stdout}{proc.stderr}")
        cls.python, cls.site = cls.venv_with_wheel("venv")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    @classmethod
    def venv_with_wheel(cls, name):
        python, site = fresh_venv(os.path.join(cls.tmp, name))
        proc = subprocess.run(
            [python, "-m", "pip", "install", "-q", "--no-deps", cls.wheel],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        return python, site

    def run_python(self, args, python=None, env_extra=None, cwd=None):
        env = dict(os.environ)
        for name in (
            "PYTHONPATH",
            "LD_PRELOAD",
            "AUTOGRAD_DEVICE_LOGGING_LIBRARY",
            "AUTOGRAD_DEVICE_LOGGING_PROGRAM",
        ):
            env.pop(name, None)
        env.update(
            PYTORCH_API_USAGE_STDERR="1",
            AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=BUILD_DIR,
            CUDA_VISIBLE_DEVICES="",
        )
        env.update(env_extra or {})
        return subprocess.run(
            [python or self.python, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd or self.tmp,
            timeout=300,
        )

    def report_of(self, proc):
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)

    def warnings_in(self, proc):
        return [
            line for line in proc.stderr.splitlines() if not line.startswith("PYTORCH_API_USAGE")
        ]

    def test_unmodified_script_logs_on_the_test_accelerator(self):
        self.assertTrue(os.path.exists(ACCELERATOR_LIBRARY), "build the project first (README)")
        proc = self.run_python(["-c", TORCH_FIRST_SCRIPT + REPORT])
        report = self.report_of(proc)
        self.assertEqual(sorted(autograd_events(proc.stderr)), sorted(EVENTS))
        self.assertEqual(report["ACTIVATED"], "on torch import")
        self.assertEqual(report["COPIES"], "1")
        self.assertEqual(self.warnings_in(proc), [])

    def test_measurement_asked_for_in_the_environment_wraps_torch(self):
        # Note [Measuring from before torch is imported]: the .pth's finder
        # activates the package from inside torch's lookup, and hands the
        # import system torch's spec with a loader that starts the sampler
        # once torch's module ran.
        proc = self.run_python(
            [
                "-c",
                TORCH_FIRST_SCRIPT
                + "for i in range(6):\n"
                + "    ((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward()\n"
                + "import autograd_device_logging\n"
                + "print('WRAPPED', hasattr(torch.autograd.backward, "
                + "'_autograd_device_logging_wrapped'))\n"
                + "print('PAIRS', sum(c.pairs for c in "
                + "autograd_device_logging.threading_cost().classes.values()))\n"
                + REPORT,
            ],
            env_extra={
                "AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING": "1",
                "AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE": "1",
                "AUTOGRAD_DEVICE_LOGGING_MEASURE_WARMUP": "1",
                "AUTOGRAD_DEVICE_LOGGING_MEASURE_WASHOUT": "0",
            },
        )
        report = self.report_of(proc)
        self.assertEqual(report["ACTIVATED"], "on torch import")
        self.assertEqual(report["WRAPPED"], "True")
        self.assertEqual(report["PAIRS"], "3")
        self.assertEqual(self.warnings_in(proc), [])

    def test_another_cxx_runtime_loaded_first(self):
        # Note [One C++ runtime per process] (cmake/library_linking.cmake):
        # a library exporting its own static libstdc++ is loaded globally,
        # then numpy, then torch (with this package through the .pth) and the
        # torch.ao.quantization import that crashed when the library
        # exported libstdc++ too. Both runtimes keep working.
        self.assertTrue(os.path.exists(OTHER_RUNTIME_LIBRARY), "build the project first (README)")
        script = (
            "import ctypes, os\n"
            f"other = ctypes.CDLL({OTHER_RUNTIME_LIBRARY!r}, mode=os.RTLD_GLOBAL | os.RTLD_NOW)\n"
            "import numpy\n" + TORCH_FIRST_SCRIPT + "import torch.ao.quantization\n"
            "assert other.adl_other_cxx_runtime_round_trip(42) == 42\n"
            "assert numpy.asarray(torch.ones(3)).sum() == 3\n" + REPORT
        )
        proc = self.run_python(["-c", script])
        report = self.report_of(proc)
        self.assertEqual(sorted(autograd_events(proc.stderr)), sorted(EVENTS))
        self.assertEqual(report["ACTIVATED"], "on torch import")
        self.assertEqual(self.warnings_in(proc), [])

    def test_check_says_how_it_was_activated(self):
        proc = self.run_python(["-m", "autograd_device_logging", "--check"])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("active:           yes", proc.stdout)
        self.assertIn("activated:        by the launcher", proc.stdout)
        self.assertIn("import hook:      installed", proc.stdout)

    def test_check_says_off_where_the_switch_is_off_at_start_up(self):
        # The .pth installs its finder whatever the switch says (Note [The
        # import hook costs a process without torch one line],
        # _activation.py); the finder reads the switch at torch's lookup, and
        # --check reports it off.
        for value in ("0", "Off"):
            proc = self.run_python(
                ["-m", "autograd_device_logging", "--check"],
                env_extra={"AUTOGRAD_DEVICE_LOGGING": value},
            )
            self.assertIn(
                f"import hook:      off here: AUTOGRAD_DEVICE_LOGGING={value}", proc.stdout, value
            )
        # Before torch's lookup, too: the finder is there, the switch is off.
        script = (
            "import sys\n"
            "finder = any(getattr(f, '__name__', '') == 'LoadBeforeTorch' for f in sys.meta_path)\n"
            "from autograd_device_logging import _activation\n"
            "print('FINDER', finder, 'INSTALLED', _activation.pth_installed())\n"
        )
        for value, installed in (("0", False), ("1", True)):
            proc = self.run_python(["-c", script], env_extra={"AUTOGRAD_DEVICE_LOGGING": value})
            self.assertIn(f"FINDER True INSTALLED {installed}", proc.stdout, proc.stderr)

    def test_a_process_without_torch_never_maps_libtorch(self):
        # A meaningful check: the hook is in place, and has loaded nothing.
        proc = self.run_python(
            [
                "-c",
                "import json, sys\n"
                "print('HOOK', any(getattr(f, '__name__', '') == 'LoadBeforeTorch'"
                " for f in sys.meta_path))\n" + REPORT,
            ]
        )
        report = self.report_of(proc)
        self.assertEqual(report["HOOK"], "True")
        self.assertEqual(report["LIBTORCH"], "False")
        self.assertEqual(report["COPIES"], "0")
        self.assertEqual(report["PACKAGE"], "False")

    def test_spawned_child_is_active(self):
        script = os.path.join(self.tmp, "spawn_parent.py")
        with open(script, "w") as f:
            f.write(
                textwrap.dedent(
                    """
                    import multiprocessing as mp
                    import torch

                    def child(_):
                        import sys
                        x = torch.ones(2, requires_grad=True)
                        (x * 2).sum().backward()
                        adl = sys.modules.get("autograd_device_logging")
                        return adl.status().activated_by if adl else "not loaded", adl.status().active

                    if __name__ == "__main__":
                        with mp.get_context("spawn").Pool(1) as pool:
                            print("CHILD", *pool.map(child, [0])[0])
                    """
                )
            )
        proc = self.run_python([script])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("CHILD on torch import True", proc.stdout)

    def test_two_rank_torchrun_job_is_active(self):
        script = os.path.join(self.tmp, "ranks.py")
        with open(script, "w") as f:
            f.write(
                textwrap.dedent(
                    """
                    import os, sys
                    import torch
                    import torch.distributed as dist
                    dist.init_process_group("gloo")
                    x = torch.ones(2, requires_grad=True)
                    (x * dist.get_rank()).sum().backward()
                    adl = sys.modules["autograd_device_logging"]
                    status = adl.status()
                    # Each rank answers in its own file: the ranks share one
                    # stdout, where their lines can interleave.
                    path = os.path.join(sys.argv[1], f"rank{dist.get_rank()}")
                    with open(path, "w") as f:
                        f.write(f"{status.activated_by} {status.active}")
                    dist.destroy_process_group()
                    """
                )
            )
        proc = self.run_python(
            [
                "-m",
                "torch.distributed.run",
                *one_node_torchrun(),
                "--nproc-per-node=2",
                script,
                self.tmp,
            ],
            env_extra={"OMP_NUM_THREADS": "1"},
        )
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        for rank in (0, 1):
            with open(os.path.join(self.tmp, f"rank{rank}")) as f:
                self.assertEqual(f.read(), "on torch import True", f"rank {rank}")

    @skip_where_torch_logs_events
    def test_off_switch_means_not_loaded(self):
        for value in ("0", "false", "No", "OFF"):
            proc = self.run_python(
                ["-c", TORCH_FIRST_SCRIPT + REPORT], env_extra={"AUTOGRAD_DEVICE_LOGGING": value}
            )
            report = self.report_of(proc)
            self.assertEqual(report["COPIES"], "0", value)
            self.assertEqual(report["PACKAGE"], "False", value)
            self.assertEqual(autograd_events(proc.stderr), [], value)

    def test_an_unknown_switch_value_is_one_warning_and_on(self):
        proc = self.run_python(
            ["-c", TORCH_FIRST_SCRIPT + REPORT], env_extra={"AUTOGRAD_DEVICE_LOGGING": "maybe"}
        )
        report = self.report_of(proc)
        self.assertEqual(report["ACTIVATED"], "on torch import")
        lines = self.warnings_in(proc)
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("ignoring AUTOGRAD_DEVICE_LOGGING=maybe", lines[0])

    def test_on_values_in_any_case_load_with_no_warning(self):
        for value in ("1", "TRUE", "Yes", "on"):
            proc = self.run_python(
                ["-c", TORCH_FIRST_SCRIPT + REPORT], env_extra={"AUTOGRAD_DEVICE_LOGGING": value}
            )
            report = self.report_of(proc)
            self.assertEqual(report["ACTIVATED"], "on torch import", value)
            self.assertEqual(report["COPIES"], "1", value)
            self.assertEqual(self.warnings_in(proc), [], value)

    def test_off_value_set_by_the_program_before_torch(self):
        # The switch is unset at start-up, so the .pth installs the finder;
        # the program then turns it off before importing torch.
        script = 'import os\nos.environ["AUTOGRAD_DEVICE_LOGGING"] = "Off"\n'
        proc = self.run_python(["-c", script + TORCH_FIRST_SCRIPT + REPORT])
        report = self.report_of(proc)
        self.assertEqual(report["COPIES"], "0")
        self.assertEqual(report["PACKAGE"], "False")
        self.assertEqual(self.warnings_in(proc), [])
        if not TORCH_LOGS_EVENTS:
            self.assertEqual(autograd_events(proc.stderr), [])

    def test_no_site_and_isolated_mean_not_loaded_and_no_error(self):
        # -S skips site, and with it site-packages and their .pth files: the
        # venv's and torch's are put on sys.path by hand here.
        with open(os.path.join(self.site, "installed_torch.pth")) as f:
            torch_site = f.read().strip()
        add_site = f"import sys\nsys.path += [{self.site!r}, {torch_site!r}]\n"
        for flags, prelude in ((["-S"], add_site), (["-I"], "")):
            proc = self.run_python([*flags, "-c", prelude + TORCH_FIRST_SCRIPT + REPORT])
            report = self.report_of(proc)
            self.assertEqual(report["COPIES"], "0", flags)
            self.assertEqual(report["PACKAGE"], "False", flags)
            self.assertEqual(self.warnings_in(proc), [], flags)

    def test_too_late_warning_names_the_cause(self):
        for flags, cause in ((["-I"], "python -I"),):
            proc = self.run_python([*flags, "-c", "import torch\nimport autograd_device_logging\n"])
            self.assertEqual(proc.returncode, 0, proc.stderr)
            lines = self.warnings_in(proc)
            self.assertEqual(len(lines), 1, proc.stderr)
            self.assertIn("imported after torch", lines[0])
            self.assertIn(f"did not run: {cause}", lines[0])

    def test_explicit_import_launcher_and_preload_load_one_copy(self):
        script = os.path.join(self.tmp, "torch_first.py")
        with open(script, "w") as f:
            f.write(TORCH_FIRST_SCRIPT + REPORT)
        cases = {
            "by import": (
                ["-c", "import autograd_device_logging\n" + TORCH_FIRST_SCRIPT + REPORT],
                {},
            ),
            "by the launcher": (["-m", "autograd_device_logging", script], {}),
            # The build tree's copy, preloaded: the wheel's must not come in too.
            "by preload": ([script], {"LD_PRELOAD": LIBRARY}),
        }
        for how, (args, env) in cases.items():
            proc = self.run_python(args, env_extra=env)
            report = self.report_of(proc)
            self.assertEqual(report["ACTIVATED"], how)
            self.assertEqual(report["COPIES"], "1", how)
            self.assertEqual(sorted(autograd_events(proc.stderr)), sorted(EVENTS), how)

    @skip_where_torch_logs_events
    def test_library_that_cannot_load_leaves_import_torch_working(self):
        python, site = self.venv_with_wheel("venv-broken")
        so = os.path.join(site, "autograd_device_logging", "libautograd_device_logging.so")
        os.remove(so)
        proc = self.run_python(["-c", TORCH_FIRST_SCRIPT + REPORT], python=python)
        report = self.report_of(proc)
        self.assertEqual(report["COPIES"], "0")
        self.assertEqual(report["ACTIVATED"], "not loaded")
        lines = self.warnings_in(proc)
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn(f"the library {so} could not be loaded", lines[0])
        self.assertIn("Fix: reinstall autograd_device_logging", lines[0])
        self.assertEqual(autograd_events(proc.stderr), [])

    def test_pip_uninstall_removes_the_pth(self):
        python, site = self.venv_with_wheel("venv-uninstall")
        pth = os.path.join(site, "autograd_device_logging.pth")
        self.assertTrue(os.path.exists(pth))
        proc = subprocess.run(
            [python, "-m", "pip", "uninstall", "-q", "-y", "autograd_device_logging"],
            capture_output=True,
            text=True,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(os.path.exists(pth))
        self.assertEqual(glob.glob(os.path.join(site, "autograd_device_logging*")), [])
        proc = self.run_python(["-c", TORCH_FIRST_SCRIPT + REPORT], python=python)
        report = self.report_of(proc)
        self.assertEqual(report["COPIES"], "0")
        self.assertEqual(self.warnings_in(proc), [])


if __name__ == "__main__":
    run_tests()
