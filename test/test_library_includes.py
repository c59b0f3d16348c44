# Owner(s): ["module: autograd"]
"""Which of the library's sources include libtorch's graph headers (Note
[Which files include libtorch's graph headers], backward_device_class.h):
only those that read a graph, so that the rest stay cheap to compile in
every build. Read with the C++ compiler's preprocessor (-M lists every
header a source includes); nothing is compiled.
"""

import glob
import os
import re
import shutil
import subprocess
import tempfile

from common_device_logging import BUILD_DIR, REPO
from torch.testing._internal.common_utils import TestCase, run_tests

import torch

SOURCE_DIR = os.path.join(REPO, "torch", "csrc", "autograd")
# torch's headers, as CMakeLists.txt finds them in the installed torch.
TORCH_INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")
# The header that brings in most of ATen's (<torch/csrc/autograd/function.h>).
GRAPH_HEADER = os.path.join("torch", "csrc", "autograd", "function.h")
# The sources that read a graph: the seam, the per-pass work, and the
# interposition (which takes the address of an Engine member).
GRAPH_READERS = {"engine.cpp", "pass_logging.cpp", "interposition.cpp"}


def compiler():
    """The C++ compiler the build used, else $CXX or c++ from PATH."""
    cache = os.path.join(BUILD_DIR, "CMakeCache.txt")
    if os.path.exists(cache):
        with open(cache) as f:
            match = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.+)$", f.read(), re.M)
        if match and os.path.exists(match.group(1)):
            return match.group(1)
    return shutil.which(os.environ.get("CXX", "c++"))


def included_headers(source):
    """Every header `source` includes, directly or not, as the build's
    include path finds them (the repository first, as CMakeLists.txt has it)."""
    flags = ["-std=c++17", "-I", REPO]
    # What adl_library_compile_settings (CMakeLists.txt) defines; the values
    # do not change what is included.
    for macro in ("VERSION", "TORCH_BUILD_VERSION", "TORCH_BUILD_COMMIT"):
        flags.append(f'-DAUTOGRAD_DEVICE_LOGGING_{macro}=""')
    flags.append("-DAUTOGRAD_DEVICE_LOGGING_TORCH_BUILD_CXX11_ABI=1")
    for path in (
        TORCH_INCLUDE,
        os.path.join(TORCH_INCLUDE, "torch", "csrc", "api", "include"),
        os.path.join(REPO, "third_party", "nlohmann_json", "include"),
    ):
        flags += ["-isystem", path]
    proc = subprocess.run([compiler(), *flags, "-M", source], capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"the preprocessor failed on {source}:\n{proc.stderr}")
    out = proc.stdout
    return {os.path.normpath(p) for p in out.replace("\\\n", " ").split()[1:]}


def includes_graph_header(source):
    return any(p.endswith(os.sep + GRAPH_HEADER) for p in included_headers(source))


class TestLibraryIncludes(TestCase):
    def setUp(self):
        if compiler() is None:
            self.skipTest("needs a C++ compiler to read the sources' includes")

    def test_only_the_graph_readers_include_the_graph_headers(self):
        sources = sorted(glob.glob(os.path.join(SOURCE_DIR, "*.cpp")))
        self.assertTrue(GRAPH_READERS <= {os.path.basename(s) for s in sources})
        for source in sources:
            with self.subTest(source=os.path.basename(source)):
                self.assertEqual(
                    includes_graph_header(source),
                    os.path.basename(source) in GRAPH_READERS,
                )

    def test_the_class_header_includes_no_graph_header(self):
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "class_header.cpp")
            with open(source, "w") as f:
                f.write("#include <torch/csrc/autograd/backward_device_class.h>\n")
            self.assertFalse(includes_graph_header(source))
            # The check can see the header where it is included.
            with open(source, "w") as f:
                f.write("#include <torch/csrc/autograd/backward_device_classifier.h>\n")
            self.assertTrue(includes_graph_header(source))


if __name__ == "__main__":
    run_tests()
