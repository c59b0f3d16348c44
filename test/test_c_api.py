# Owner(s): ["module: autograd"]
"""One boundary between C++ and Python: the C ABI is declared in one header,
torch/csrc/autograd/device_logging_c_api.h, and described to Python by one
ctypes table, SIGNATURES in python/autograd_device_logging/_native.py. These
tests hold the two to each other (names, argument and return types), and keep
every other module of the package from loading the library or declaring a
signature of its own.
"""

import ast
import ctypes
import glob
import importlib.util
import os
import re

from torch.testing._internal.common_utils import TestCase, run_tests

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TEST_DIR)
HEADER = os.path.join(REPO, "torch", "csrc", "autograd", "device_logging_c_api.h")
PACKAGE = os.path.join(REPO, "python", "autograd_device_logging")


def load_native():
    """_native.py alone: importing it through the package would activate
    the package in the test's process."""
    spec = importlib.util.spec_from_file_location("adl_native", os.path.join(PACKAGE, "_native.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_native = load_native()

# The C types the header uses, as ctypes names them.
C_TYPES = {
    "void": None,
    "int": ctypes.c_int,
    "double": ctypes.c_double,
    "unsigned": ctypes.c_uint,
    "uint64_t": ctypes.c_uint64,
    "int64_t": ctypes.c_int64,
    "size_t": ctypes.c_size_t,
    "const char*": ctypes.c_char_p,
    "char*": ctypes.c_char_p,
    "uint64_t*": ctypes.POINTER(ctypes.c_uint64),
}


def c_type(text):
    text = re.sub(r"\s+", " ", text.strip()).replace(" *", "*")
    if text not in C_TYPES:
        raise AssertionError(f"the test does not know the C type {text!r}: add it to C_TYPES")
    return C_TYPES[text]


def parameter_type(parameter):
    # "const char* dir" -> "const char*"; "void" alone is no parameter.
    parameter = parameter.strip()
    match = re.match(r"(.*?[\s*])(\w+)$", parameter)
    return c_type(match.group(1) if match else parameter)


def header_declarations(path=HEADER):
    """{name without the prefix: (return type, [argument types])} of every
    function the header declares."""
    with open(path) as f:
        text = "".join(line for line in f if not line.lstrip().startswith(("#", "//")))
    declarations = {}
    pattern = (
        r"AUTOGRAD_DEVICE_LOGGING_API\s+([^;(]*?)\s*\b"
        + _native.PREFIX
        + r"(\w+)\s*\(([^)]*)\)\s*;"
    )
    for restype, name, parameters in re.findall(pattern, text):
        parameters = parameters.strip()
        args = (
            [] if parameters in ("", "void") else [parameter_type(p) for p in parameters.split(",")]
        )
        declarations[name] = (c_type(restype), args)
    return declarations


def same_type(a, b):
    # ctypes' simple types and POINTER() are cached: equal types are one
    # object (c_size_t and c_uint64 are one on LP64, as in C's ABI).
    return a is b


class TestCApi(TestCase):
    def test_the_header_is_read(self):
        # The comparison below must compare something.
        declared = header_declarations()
        self.assertGreater(len(declared), 20)
        self.assertEqual(declared["set_report_dir"], (None, [ctypes.c_char_p]))
        self.assertEqual(declared["take_pass_census"][1][2], ctypes.POINTER(ctypes.c_uint64))

    def test_the_table_names_exactly_the_declared_functions(self):
        declared, table = set(header_declarations()), set(_native.SIGNATURES)
        self.assertEqual(sorted(declared - table), [], "declared, not in the ctypes table")
        self.assertEqual(sorted(table - declared), [], "in the ctypes table, not declared")

    def test_the_table_has_the_declared_types(self):
        for name, (restype, argtypes) in header_declarations().items():
            with self.subTest(name=name):
                table_restype, table_argtypes = _native.SIGNATURES[name]
                self.assertTrue(
                    same_type(restype, table_restype),
                    f"{name} returns {restype}, the table says {table_restype}",
                )
                self.assertEqual(len(argtypes), len(table_argtypes), name)
                for i, (a, b) in enumerate(zip(argtypes, table_argtypes)):
                    self.assertTrue(same_type(a, b), f"{name} argument {i}: {a}, table {b}")

    def test_no_other_module_loads_the_library_or_declares_a_signature(self):
        for path in sorted(glob.glob(os.path.join(PACKAGE, "*.py"))):
            if os.path.basename(path) == "_native.py":
                continue
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in ("restype", "argtypes"):
                    self.fail(f"{path}:{node.lineno} declares a ctypes signature")
                if isinstance(node, ast.Attribute) and node.attr in ("CDLL", "cdll", "LoadLibrary"):
                    self.fail(f"{path}:{node.lineno} loads a library")


if __name__ == "__main__":
    run_tests()
