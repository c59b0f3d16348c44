# Owner(s): ["module: autograd"]
"""The README and the manual in docs/, read as files (nothing is built or
imported): a README that fits on a screen, links that resolve, tables of the
source files that name every one, and every cited Note defined somewhere."""

import glob
import importlib.util
import os
import re
import subprocess

from torch.testing._internal.common_utils import TestCase, run_tests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 200
# The files of docs/ whose figures come from scripts (Note [A generated
# section carries its stamp], benchmarks/doc_sections.py): each holds at
# least one stamped section. The rest of docs/ is prose.
GENERATED = (
    "fleet-report-scale.md",
    "gpu-verification.md",
    "performance.md",
    "semantics.md",
    "soak.md",
    "startup.md",
    "threading-cost.md",
    "torch-versions.md",
    "usage.md",
)


def doc_sections():
    """benchmarks/doc_sections.py, loaded from its file (benchmarks/ is not
    a package)."""
    spec = importlib.util.spec_from_file_location(
        "adl_doc_sections", os.path.join(REPO, "benchmarks", "doc_sections.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def tracked_text_files():
    """The repository's own text files (third-party code aside)."""
    out = subprocess.run(
        ["git", "-C", REPO, "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    keep = (".py", ".h", ".cpp", ".md", ".sh", ".txt", ".cmake", ".json", ".toml", ".in", ".map")
    return [p for p in out if p.endswith(keep) and not p.startswith("third_party/")]


def markdown_links(text):
    """The targets of the [text](target) links and images in `text`."""
    return re.findall(r"\]\(([^)\s]+)\)", text)


def joined(text):
    """`text` with comment markers and string splits at line ends removed, so
    that a Note's name wrapped over two lines reads as one."""
    text = re.sub(r'"\s*\n\s*"', "", text)
    text = re.sub(r"\n\s*(//|#)?\s*", " ", text)
    return re.sub(r"\s+", " ", text)


class TestDocs(TestCase):
    def test_the_readme_fits_on_a_screen(self):
        lines = read("README.md").count("\n")
        self.assertLessEqual(lines, README_MAX_LINES)

    def test_every_link_in_the_readme_and_the_manual_resolves(self):
        manual = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
        for path in ["README.md", *(os.path.relpath(p, REPO) for p in manual)]:
            for target in markdown_links(read(path)):
                if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                    continue
                resolved = os.path.join(REPO, os.path.dirname(path), target.split("#")[0])
                self.assertTrue(os.path.exists(resolved), f"{path}: {target} does not exist")

    def test_the_manual_names_every_source_file(self):
        internals = read(os.path.join("docs", "internals.md"))
        named = set(re.findall(r"`([\w.]+)`", internals))
        for stem in re.findall(r"`(\w+)\.\{h,cpp\}`", internals):
            named |= {stem + ".h", stem + ".cpp"}
        sources = glob.glob(os.path.join(REPO, "torch", "csrc", "autograd", "*.[hc]*"))
        sources += glob.glob(os.path.join(REPO, "python", "autograd_device_logging", "*.py"))
        for path in sources:
            name = os.path.basename(path)
            if name.endswith((".h", ".cpp", ".py")):
                self.assertIn(name, named, f"docs/internals.md does not name {name}")

    def test_no_generated_section_was_edited_by_hand(self):
        sections = doc_sections()
        for path in sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
            text = read(path)
            name = os.path.basename(path)
            self.assertEqual(sections.stamp_problems(text), [], f"docs/{name}: re-run its script")
            if name in GENERATED:
                self.assertGreater(len(list(sections.sections(text))), 0, name)

    def test_a_stamp_catches_an_edit(self):
        sections = doc_sections()
        section = sections.stamped("<!-- s -->\n| model | +1.0% |\n<!-- /s -->\n")
        self.assertEqual(sections.stamp_problems(section), [])
        # One figure typed over, one line added, the stamp removed.
        for edited in (
            section.replace("+1.0%", "+1.5%"),
            section.replace("| model", "by hand\n| model"),
            "\n".join(l for l in section.split("\n") if "sha256" not in l),
        ):
            self.assertEqual(len(sections.stamp_problems(edited)), 1, edited)
        # Re-stamping what a script writes again is what makes it pass.
        again = sections.stamped(section.replace("+1.0%", "+1.5%"))
        self.assertEqual(sections.stamp_problems(again), [])

    def test_every_cited_note_is_defined(self):
        defined, cited = set(), {}
        for path in tracked_text_files():
            full = os.path.join(REPO, path)
            if not os.path.isfile(full):
                continue
            with open(full, errors="replace") as f:
                text = f.read()
            for m in re.finditer(r"Note \[([^\]]+)\]\s*\n\s*(//|#)?\s*~~~", text):
                defined.add(m.group(1))
            for name in re.findall(r"Note \[([^\]]+)\]", joined(text)):
                cited.setdefault(name, path)
        self.assertGreater(len(defined), 40)
        missing = {name: path for name, path in cited.items() if name not in defined}
        self.assertEqual(missing, {}, "Notes cited but defined nowhere (name: where cited)")


if __name__ == "__main__":
    run_tests()
