# Owner(s): ["module: autograd"]
"""Activation in one place (Note [Activation],
python/autograd_device_logging/_activation.py): importing the package loads
nothing until torch is imported, settings made before then wait for the load,
activation is safe to call twice, and the package's finder cannot break
`import torch`. Each case runs in a fresh interpreter that sees the built
package on PYTHONPATH.
"""


from common_device_logging import LIBRARY, require_built, run_child
from torch.testing._internal.common_utils import TestCase, run_tests

# What the process has mapped, printed after `label`.
MAPS = """
def mapped(label):
    maps = open("/proc/self/maps").read()
    copies = len({line.split()[-1] for line in maps.splitlines()
                  if line.endswith("libautograd_device_logging.so")})
    print(label, "COPIES", copies, "LIBTORCH", "libtorch_cpu.so" in maps, flush=True)
"""

BACKWARD = """
x = torch.ones(2, requires_grad=True)
(x * 2).sum().backward()
assert torch.equal(x.grad, torch.full((2,), 2.0))
"""

QUIET = {"PYTORCH_API_USAGE_STDERR": None, "CUDA_VISIBLE_DEVICES": ""}


def stderr_warnings(result):
    return [line for line in result.stderr.splitlines() if "autograd_device_logging" in line]


class TestActivation(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY)

    def run_program(self, code, *flags):
        result = run_child([*flags, "-c", MAPS + code], env_extra=QUIET)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return result

    def test_importing_the_package_loads_nothing_until_torch(self):
        result = self.run_program(
            "import autograd_device_logging as adl\n"
            "mapped('BEFORE')\n"
            "s = adl.status()\n"
            "print('BEFORE_STATUS', s.activated_by, '|', s.disabled_reason)\n"
            "import torch\n"
            "mapped('AFTER')\n" + BACKWARD + "s = adl.status()\n"
            "print('LOADED', s.activated_by, s.active, s.disabled_reason)\n"
        )
        self.assertIn("BEFORE COPIES 0 LIBTORCH False", result.stdout)
        self.assertIn("BEFORE_STATUS not loaded | not loaded yet", result.stdout)
        self.assertIn("AFTER COPIES 1 LIBTORCH True", result.stdout)
        self.assertIn("LOADED by import True None", result.stdout)
        self.assertEqual(stderr_warnings(result), [])

    def test_settings_made_before_torch_wait_for_the_load(self):
        result = self.run_program(
            "import autograd_device_logging as adl\n"
            "adl.enable_device_stats()\n"
            "adl.measure_threading(rate=1.0, warmup=0, washout=0, max_pairs=2)\n"
            "import torch\n"
            "print('STATS', adl.device_stats().enabled)\n"
            "print('WRAPPED', hasattr(torch.autograd.backward, '_autograd_device_logging_wrapped'))\n"
            # Torch's own loader is back in its module once it ran.
            "print('LOADER', type(torch.__loader__).__name__, "
            "torch.__spec__.loader is torch.__loader__)\n"
            "for _ in range(4):\n"
            + "".join("    " + line + "\n" for line in BACKWARD.split("\n"))
            + "print('PAIRS', sum(c.pairs for c in adl.threading_cost().classes.values()))\n"
            "import os; os._exit(0)\n"
        )
        self.assertIn("STATS True", result.stdout)
        self.assertIn("WRAPPED True", result.stdout)
        self.assertIn("LOADER SourceFileLoader True", result.stdout)
        self.assertIn("PAIRS 2", result.stdout)

    def test_activation_is_safe_to_call_twice(self):
        result = self.run_program(
            "import sys\n"
            "import autograd_device_logging as adl\n"
            "from autograd_device_logging import _activation\n"
            "for _ in range(3):\n"
            "    _activation.activate('by import')\n"
            "print('FINDERS', sum(f is _activation._LoadBeforeTorch for f in sys.meta_path))\n"
            "import torch\n" + BACKWARD + "for how in ('by import', 'by the launcher'):\n"
            "    _activation.activate(how)\n"
            "mapped('AFTER')\n"
            "print('FINDERS', sum(f is _activation._LoadBeforeTorch for f in sys.meta_path))\n"
            "print('HOW', adl.status().activated_by, adl.status().active)\n"
        )
        self.assertEqual(result.stdout.count("FINDERS"), 2, result.stdout)
        self.assertIn("FINDERS 1", result.stdout)
        self.assertIn("FINDERS 0", result.stdout)
        self.assertIn("AFTER COPIES 1", result.stdout)
        self.assertIn("HOW by import True", result.stdout)

    def test_the_last_way_in_before_the_load_names_it(self):
        result = self.run_program(
            "import autograd_device_logging as adl\n"
            "from autograd_device_logging import _activation\n"
            "_activation.activate('by the launcher')\n"
            "import torch\n" + BACKWARD + "print('HOW', adl.status().activated_by)\n"
        )
        self.assertIn("HOW by the launcher", result.stdout)

    def test_a_failing_finder_cannot_break_import_torch(self):
        # Note [The .pth cannot break import torch]: the package's own finder
        # is guarded too, also where warnings are errors.
        code = (
            "import autograd_device_logging as adl\n"
            "from autograd_device_logging import _activation\n"
            "def broken():\n"
            "    raise RuntimeError('finder failed')\n"
            "_activation._load = broken\n"
            "import torch\n" + BACKWARD + "print('IMPORTED', adl.status().activated_by)\n"
        )
        for flags in ((), ("-W", "error")):
            with self.subTest(flags=flags):
                result = self.run_program(code, *flags)
                self.assertIn("IMPORTED not loaded", result.stdout)
                lines = stderr_warnings(result)
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertIn("RuntimeError: finder failed", lines[0])

    def test_events_emitted_is_a_deprecated_alias_of_events_raised(self):
        result = self.run_program(
            "import warnings\n"
            "import autograd_device_logging as adl, torch\n" + BACKWARD + "s = adl.status()\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    same = s.events_emitted == s.events_raised\n"
            "print('ALIAS', same, [str(w.category.__name__) for w in caught])\n"
            "print('MESSAGE', caught[0].message)\n"
        )
        self.assertIn("ALIAS True ['DeprecationWarning']", result.stdout)
        self.assertIn("use Status.events_raised", result.stdout)

    def test_a_process_that_never_imports_torch_never_loads_it(self):
        # The report and every other offline entry point, by construction.
        result = self.run_program(
            "import autograd_device_logging, autograd_device_logging.fleet_report\n"
            "import json, statistics\n"
            "mapped('END')\n"
        )
        self.assertIn("END COPIES 0 LIBTORCH False", result.stdout)


if __name__ == "__main__":
    run_tests()
