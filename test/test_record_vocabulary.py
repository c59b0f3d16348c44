# Owner(s): ["module: autograd"]
"""The record's vocabulary is the schema's (schema/process_record.schema.json):
every field name, enumerated value, device class and event name that the C++
writer and the Python reader spell is one the schema lists, and every one the
schema lists is spelled there. Read from the source, both ways, so that a name
added on one side only fails here."""

import json
import os
import re
import tempfile

from torch.testing._internal.common_utils import TestCase, run_tests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUTOGRAD = os.path.join(REPO, "torch", "csrc", "autograd")
PACKAGE = os.path.join(REPO, "python", "autograd_device_logging")

with open(os.path.join(REPO, "schema", "process_record.schema.json")) as _f:
    SCHEMA = json.load(_f)
PROPERTIES = SCHEMA["properties"]


def source(*parts):
    with open(os.path.join(*parts)) as f:
        return f.read()


def function_body(text, signature):
    """The text of the C++ function whose definition starts with `signature`,
    to its closing brace."""
    start = text.index(signature)
    depth, i = 0, text.index("{", start)
    while True:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
        i += 1


def threading_cost_object():
    return next(a for a in PROPERTIES["threading_cost"]["anyOf"] if a.get("type") == "object")


class TestRecordVocabulary(TestCase):
    def setUp(self):
        super().setUp()
        self.record = source(AUTOGRAD, "record_json.cpp")
        self.identity = source(AUTOGRAD, "process_identity.cpp")

    def test_the_writer_writes_the_schemas_fields(self):
        written = set(re.findall(r'\br\["(\w+)"\]\s*=', self.record))
        self.assertEqual(written, set(PROPERTIES))
        cost = set(
            re.findall(
                r'\{"(\w+)",', function_body(self.record, "nlohmann::json threading_cost_json(")
            )
        )
        cost |= set(re.findall(r'out\["(\w+)"\] =', self.record))
        self.assertEqual(cost, set(threading_cost_object()["properties"]))
        # Where the threads ran (thread_placement.cpp): its fields, and the
        # names of the threads.
        placement_schema = threading_cost_object()["properties"]["placement"]
        thread_schema = placement_schema["properties"]["threads"]
        placement = source(AUTOGRAD, "thread_placement.cpp")
        body = function_body(placement, "nlohmann::json PlacementSamples::to_json(")
        self.assertEqual(
            set(re.findall(r'\{"(\w+)",', body)),
            set(placement_schema["properties"])
            | set(thread_schema["additionalProperties"]["properties"]),
        )
        calling = re.search(r'kCallingThread = "(\w+)"', placement).group(1)
        device = re.search(r'kDeviceThreadPrefix = "(\w+)"', placement).group(1)
        self.assertEqual(thread_schema["propertyNames"]["examples"], [calling, device + "0"])
        make_record = function_body(self.record, "std::string encode_record_json(")
        for field in ("torch", "parent"):
            statement = re.search(rf'r\["{field}"\] = \{{(.*?)\}};', make_record, re.S).group(1)
            self.assertEqual(
                set(re.findall(r'\{"(\w+)",', statement)), set(PROPERTIES[field]["properties"])
            )

    def test_the_writers_values_are_the_schemas(self):
        jobs = function_body(
            self.identity, "std::pair<std::string, std::string> job_wide_name_and_source("
        )
        self.assertEqual(
            set(re.findall(r'"(\w+)"\}', jobs)), set(PROPERTIES["job_source"]["examples"])
        )
        role = function_body(self.identity, "std::string role()")
        self.assertEqual(
            set(re.findall(r'return "(\w+)";', role)), set(PROPERTIES["role"]["examples"])
        )
        logged_by = re.search(
            r'r\["events_logged_by"\] = [\w.]+ \? "(\w+)" : "(\w+)";', self.record
        )
        self.assertEqual(set(logged_by.groups()), set(PROPERTIES["events_logged_by"]["examples"]))
        occasions = function_body(
            source(AUTOGRAD, "output_sinks.cpp"), "const char* record_occasion_name("
        )
        self.assertEqual(
            set(re.findall(r'return "(\w+)";', occasions)),
            set(PROPERTIES["written_at"]["examples"]),
        )

    def test_classes_and_events_are_the_schemas_in_cxx_and_python(self):
        classes = PROPERTIES["pass_classes"]["anyOf"][0]["required"]
        class_header = source(AUTOGRAD, "backward_device_class.h")
        cxx_classes = re.search(r"kBackwardDeviceClassNames = \{([^}]*)\}", class_header).group(1)
        self.assertEqual(re.findall(r'"(\w+)"', cxx_classes), classes)
        self.assertEqual(
            threading_cost_object()["properties"]["pairs"]["propertyNames"]["examples"], classes
        )
        events = PROPERTIES["events"]["items"]["examples"]
        self.assertEqual(re.findall(r'k\w+BackwardEventName =\s*"([\w.]+)";', class_header), events)
        vocabulary = {}
        exec(source(PACKAGE, "vocabulary.py"), vocabulary)
        self.assertEqual(list(vocabulary["CLASSES"]), classes)
        self.assertEqual(list(vocabulary["EVENTS"]), events)
        self.assertEqual(vocabulary["EVENT_BITS"], {events[0]: 1, events[1]: 2})

    def spellings(self, names, folders=(AUTOGRAD, PACKAGE)):
        """(file, name) for each place outside the two vocabularies that
        spells one of `names` as a string literal."""
        found = []
        for folder in folders:
            for name in sorted(os.listdir(folder)):
                if name in ("backward_device_class.h", "vocabulary.py"):
                    continue
                if name.endswith((".h", ".cpp", ".py")):
                    text = source(folder, name)
                    found += [(name, n) for n in names if f'"{n}"' in text]
        return found

    def test_the_names_are_spelled_once_per_language(self):
        # Every encoder (the record, the Prometheus text, the report's
        # exports), the C API and the report take them from the vocabulary.
        names = PROPERTIES["pass_classes"]["anyOf"][0]["required"]
        names += PROPERTIES["events"]["items"]["examples"]
        self.assertEqual(self.spellings(names), [])

    def test_a_name_on_one_side_only_fails(self):
        # The checks above find a planted difference, and a second spelling.
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "report_text.py"), "w") as f:
                f.write(source(PACKAGE, "report_text.py") + '\nNEGATIVE = "cpu_only"\n')
            self.assertEqual(self.spellings(["cpu_only"], [tmp]), [("report_text.py", "cpu_only")])
        planted = self.record.replace('r["pid"] =', 'r["process_id"] =')
        self.assertNotEqual(set(re.findall(r'\br\["(\w+)"\]\s*=', planted)), set(PROPERTIES))
        role = function_body(self.identity, "std::string role()").replace('"agent"', '"launcher"')
        self.assertNotEqual(
            set(re.findall(r'return "(\w+)";', role)), set(PROPERTIES["role"]["examples"])
        )


class TestSettingsAreReadInOnePlace(TestCase):
    """Note [The library's settings are read once, at load] (settings.h) and
    Note [The package's settings] (settings.py)."""

    def test_the_switch_words_are_spelled_once_per_language(self):
        vocabulary = {}
        exec(source(PACKAGE, "vocabulary.py"), vocabulary)
        cxx = source(AUTOGRAD, "settings.cpp")
        for words, name in (
            (vocabulary["ON_WORDS"], "kOnWords"),
            (vocabulary["OFF_WORDS"], "kOffWords"),
        ):
            spelled = re.search(name + r" = \{([^}]*)\}", cxx).group(1)
            self.assertEqual(tuple(re.findall(r'"(\w+)"', spelled)), words)
        # The .pth runs before the package can be imported: its off words.
        pth = source(REPO, "python", "autograd_device_logging.pth")
        (off,) = re.findall(r"not in \(([^)]*)\)", pth)
        self.assertEqual(tuple(re.findall(r'\\?"(\w+)\\?"', off)), vocabulary["OFF_WORDS"])
        # No other file of either language spells a word list of its own.
        for folder in (AUTOGRAD, PACKAGE):
            for name in sorted(os.listdir(folder)):
                if name.endswith((".h", ".cpp", ".py")) and name not in (
                    "settings.cpp",
                    "vocabulary.py",
                ):
                    text = source(folder, name)
                    self.assertNotRegex(text, r'"yes",\s*"on"', name)
                    self.assertNotRegex(text, r'"no",\s*"off"', name)

    def test_the_environment_is_read_in_one_place_per_language(self):
        # C++: the settings, and the identity (what the launcher and the
        # scheduler say: Note [A process's identity is decided once, at
        # start-up], process_identity.h). Python: the settings.
        readers = {"settings.cpp", "process_identity.cpp", "settings.py"}
        found = []
        for folder in (AUTOGRAD, PACKAGE):
            for name in sorted(os.listdir(folder)):
                if name.endswith((".h", ".cpp", ".py")) and name not in readers:
                    text = source(folder, name)
                    if re.search(r"getenv\(|os\.environ\b|environ\.get\(", text):
                        found.append(name)
        self.assertEqual(found, [])


if __name__ == "__main__":
    run_tests()
