# Owner(s): ["module: autograd"]
"""The Python package's structure, read from its source (nothing is imported):
no import circle among its modules, no module attribute assigned from another
module, and no command line read outside __main__.py (Note [Activation],
python/autograd_device_logging/_activation.py: what loads the library is
decided by construction, not by argv).
"""

import ast
import glob
import os

from torch.testing._internal.common_utils import TestCase, run_tests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(REPO, "python", "autograd_device_logging")
PACKAGE = "autograd_device_logging"


def modules():
    """{module name: parsed source} of every module of the package."""
    out = {}
    for path in sorted(glob.glob(os.path.join(PACKAGE_DIR, "*.py"))):
        stem = os.path.splitext(os.path.basename(path))[0]
        name = PACKAGE if stem == "__init__" else f"{PACKAGE}.{stem}"
        with open(path) as f:
            out[name] = ast.parse(f.read(), path)
    return out


def package_imports(tree):
    """The package's modules that `tree` imports, anywhere in it, and the
    local names bound to them."""
    imported, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    imported.add(alias.name)
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            # `from . import x` and `from .x import y`, inside the package.
            if node.module:
                imported.add(f"{PACKAGE}.{node.module}")
            else:
                for alias in node.names:
                    imported.add(f"{PACKAGE}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{PACKAGE}.{alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == PACKAGE:
                for alias in node.names:
                    imported.add(f"{PACKAGE}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{PACKAGE}.{alias.name}"
            elif node.module.startswith(PACKAGE + "."):
                imported.add(node.module)
    return imported, aliases


def cycle(graph):
    """One import circle of `graph` as a list of modules, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


class TestPackageStructure(TestCase):
    def test_the_package_is_read(self):
        found = modules()
        self.assertIn(f"{PACKAGE}._activation", found)
        self.assertIn(f"{PACKAGE}._native", found)
        imported, _ = package_imports(found[PACKAGE])
        self.assertIn(f"{PACKAGE}._activation", imported)

    def test_no_import_circle(self):
        found = modules()
        graph = {}
        for name, tree in found.items():
            imported, _ = package_imports(tree)
            # A submodule's import runs the package's __init__ first; that
            # edge is no circle of the submodule's making, so it is left out.
            graph[name] = {m for m in imported if m in found and m != name}
        # The checker itself finds a planted circle.
        self.assertEqual(cycle({"a": {"b"}, "b": {"a"}}), ["a", "b", "a"])
        self.assertIsNone(cycle(graph), f"import circle: {cycle(graph)}")

    def test_no_module_attribute_assigned_from_another_module(self):
        for name, tree in modules().items():
            _, aliases = package_imports(tree)
            for node in ast.walk(tree):
                targets = []
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id in aliases
                    ):
                        self.fail(
                            f"{name}:{node.lineno} assigns {target.value.id}.{target.attr}, "
                            f"an attribute of {aliases[target.value.id]}"
                        )

    def test_the_report_imports_neither_torch_nor_the_library(self):
        # The report runs offline, next to jobs or on a laptop: its modules
        # import each other and nothing else of the package (whose __init__
        # arranges the library's load), nor torch.
        found = modules()
        report = f"{PACKAGE}.fleet_report"
        reached, todo = set(), [report]
        while todo:
            name = todo.pop()
            if name in reached:
                continue
            reached.add(name)
            imported, _ = package_imports(found[name])
            self.assertNotIn(PACKAGE, imported, f"{name} imports the package")
            todo += [m for m in imported if m in found]
            for node in ast.walk(found[name]):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                for imported_name in names:
                    self.assertNotEqual(imported_name.split(".")[0], "torch", name)
        self.assertNotIn(f"{PACKAGE}._native", reached)
        self.assertNotIn(f"{PACKAGE}._activation", reached)
        self.assertIn(f"{PACKAGE}.record_fields", reached)  # the walk follows relative imports
        self.assertIn(f"{PACKAGE}.cost_statistics", reached)

    def test_argv_is_read_only_in_main(self):
        for name, tree in modules().items():
            if name == f"{PACKAGE}.__main__":
                continue
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr in ("argv", "orig_argv")
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "sys"
                    and isinstance(node.ctx, ast.Load)
                ):
                    self.fail(f"{name}:{node.lineno} reads sys.{node.attr}")


if __name__ == "__main__":
    run_tests()
