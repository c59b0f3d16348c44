# Owner(s): ["module: autograd"]
"""What the built library puts into a process: its dynamic symbol table is
exactly its API (Note [The library exports its API and nothing else]), and it
needs the shared C++ runtime that libtorch needs (Note [One C++ runtime per
process]), also when built as a toolchain that links libstdc++ statically.

The API is read from the headers that declare it: every declaration that the
public C++ headers and the private C ABI header mark
AUTOGRAD_DEVICE_LOGGING_API, and Engine::compute_dependencies and
Engine::ready_queue, the interposed definitions. The symbol
tables are read with binutils' nm and objdump.
"""

import os
import re
import shutil
import subprocess
import sys
import unittest

from common_device_logging import BUILD_DIR, LIBRARY, OTHER_RUNTIME_LIBRARY, REPO, require_built
from torch.testing._internal.common_utils import TestCase, run_tests

import torch

# The library as -static-libstdc++ -static-libgcc builds it (test/CMakeLists.txt).
STATIC_RUNTIME_LIBRARY = os.path.join(
    BUILD_DIR, "test", "static_cxx_runtime", "libautograd_device_logging.so"
)
# Installed with the library (CMakeLists.txt): the C++ API.
PUBLIC_HEADERS = [
    os.path.join(REPO, "torch", "csrc", "autograd", name)
    for name in ("device_logging.h", "device_stats.h")
]
# The C ABI, private to the library and its Python package.
C_API_HEADER = os.path.join(REPO, "torch", "csrc", "autograd", "device_logging_c_api.h")
CXX_NAMESPACE = "torch::autograd::device_logging::"
INTERPOSED = {
    "torch::autograd::Engine::compute_dependencies",
    "torch::autograd::Engine::ready_queue",
}
C_PREFIX = "autograd_device_logging_"
LIBTORCH_CPU = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
needs_binutils = unittest.skipIf(
    shutil.which("nm") is None or shutil.which("objdump") is None,
    "needs binutils (nm, objdump) to read the library's symbol tables",
)


def declared_api(headers):
    """Every function `headers` export: C functions by name, C++ functions
    qualified with their namespace."""
    names = set()
    for header in headers:
        with open(header) as f:
            # Declarations only: the macro's own #define is not one.
            text = "".join(line for line in f if not line.lstrip().startswith("#"))
        for name in re.findall(r"\bAUTOGRAD_DEVICE_LOGGING_API\s+[^;(]*?(\w+)\s*\(", text):
            names.add(name if name.startswith(C_PREFIX) else CXX_NAMESPACE + name)
    return names


def documented_api():
    """Every function the library exports by its headers, and the interposed
    definitions."""
    return INTERPOSED | declared_api(PUBLIC_HEADERS + [C_API_HEADER])


def exported_functions(library):
    """The names (demangled, without parameters or ABI tags) of the symbols
    the library defines in its dynamic symbol table."""
    out = subprocess.run(
        ["nm", "-DC", "--defined-only", library], capture_output=True, text=True, check=True
    ).stdout
    names = set()
    for line in out.splitlines():
        # "ADDRESS TYPE NAME", NAME possibly with spaces. A lowercase type is
        # a local symbol (some toolchains keep a few in .dynsym), which binds
        # nothing outside the library; "u" is a unique global.
        _, kind, name = line.split(maxsplit=2)
        if kind.islower() and kind != "u":
            continue
        names.add(re.sub(r"\[abi:\w+\]", "", name.split("(")[0]))
    return names


def needed(library):
    out = subprocess.run(
        ["objdump", "-p", library], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"^\s*NEEDED\s+(\S+)$", out, re.M)


@needs_binutils
class TestExportedSymbols(TestCase):
    def test_the_headers_declare_the_api(self):
        # The reading of the headers must find the API, or the comparisons
        # below would compare nothing.
        api = documented_api()
        self.assertIn(CXX_NAMESPACE + "device_logging_status", api)
        self.assertIn(CXX_NAMESPACE + "format_backward_device_stats", api)
        self.assertIn(C_PREFIX + "disabled_reason", api)
        self.assertIn(C_PREFIX + "stats", api)
        self.assertGreater(len(api), 20)

    def test_the_public_headers_hold_the_cxx_api_alone(self):
        # The C ABI is declared once, in its private header; the installed
        # headers carry no C function.
        public, c_api = declared_api(PUBLIC_HEADERS), declared_api([C_API_HEADER])
        self.assertEqual([n for n in public if n.startswith(C_PREFIX)], [])
        self.assertTrue(c_api and all(n.startswith(C_PREFIX) for n in c_api), c_api)

    def assert_exports_exactly_the_api(self, library):
        require_built(self, library)
        exported = exported_functions(library)
        api = documented_api()
        beyond, missing = sorted(exported - api), sorted(api - exported)
        self.assertFalse(beyond, f"{library} exports symbols beyond its API: {beyond}")
        self.assertFalse(missing, f"{library} does not export its whole API: {missing}")

    def test_library_exports_exactly_its_api(self):
        self.assert_exports_exactly_the_api(LIBRARY)

    def test_static_runtime_build_exports_exactly_its_api(self):
        self.assert_exports_exactly_the_api(STATIC_RUNTIME_LIBRARY)

    def assert_needs_the_runtime_libtorch_needs(self, library):
        require_built(self, library)
        ours, libtorch = needed(library), needed(LIBTORCH_CPU)
        for soname in ("libstdc++.so.6", "libgcc_s.so.1"):
            self.assertIn(soname, libtorch)
            self.assertIn(soname, ours, f"{library} does not share the process's {soname}")

    def test_library_needs_the_runtime_libtorch_needs(self):
        self.assert_needs_the_runtime_libtorch_needs(LIBRARY)

    def test_static_runtime_build_needs_the_runtime_libtorch_needs(self):
        self.assert_needs_the_runtime_libtorch_needs(STATIC_RUNTIME_LIBRARY)

    def test_process_maps_one_libstdcxx(self):
        # Loaded next to torch, the library and libtorch use the one
        # libstdc++ file the process maps.
        require_built(self, LIBRARY)
        code = (
            f"import ctypes, os; ctypes.CDLL({LIBRARY!r}, mode=os.RTLD_NOW); import torch\n"
            "maps = open('/proc/self/maps').read().splitlines()\n"
            "print('\\n'.join(sorted({l.split()[-1] for l in maps if 'libstdc++.so' in l})))"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(len(proc.stdout.split()), 1, proc.stdout)

    def test_other_runtime_library_exports_a_cxx_runtime(self):
        # test_import_hook's other C++ runtime is one: it exports the
        # libstdc++ symbols that interpose libtorch's.
        require_built(self, OTHER_RUNTIME_LIBRARY)
        exported = exported_functions(OTHER_RUNTIME_LIBRARY)
        self.assertNotIn("libstdc++.so.6", needed(OTHER_RUNTIME_LIBRARY))
        self.assertIn("vtable for std::exception", exported)
        self.assertIn("typeinfo for std::type_info", exported)


if __name__ == "__main__":
    run_tests()
