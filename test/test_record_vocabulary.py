# Owner(s): ["module: autograd"]
"""The record's vocabulary is the schema's (schema/process_record.schema.json):
every field name, enumerated value, device class and event name that the C++
writer and the Python reader spell is one the schema lists, and every one the
schema lists is spelled there. Read from the source, both ways, so that a name
added on one side only fails here."""

import json
import os
import re

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
        self.record = source(AUTOGRAD, "process_record.cpp")
        self.identity = source(AUTOGRAD, "process_identity.cpp")

    def test_the_writer_writes_the_schemas_fields(self):
        written = set(re.findall(r'\br\["(\w+)"\]\s*=', self.record))
        self.assertEqual(written, set(PROPERTIES))
        cost = set(
            re.findall(r'\{"(\w+)",', function_body(self.record, "nlohmann::json to_json()"))
        )
        cost |= set(re.findall(r'threading_cost\["(\w+)"\] =', self.record))
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
        make_record = function_body(self.record, "nlohmann::json make_record(")
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
        logged_by = re.search(r'r\["events_logged_by"\] = \w+ \? "(\w+)" : "(\w+)";', self.record)
        self.assertEqual(set(logged_by.groups()), set(PROPERTIES["events_logged_by"]["examples"]))
        occasions = function_body(
            source(AUTOGRAD, "record_writer.cpp"), "const char* record_occasion_name("
        )
        self.assertEqual(
            set(re.findall(r'return "(\w+)";', occasions)),
            set(PROPERTIES["written_at"]["examples"]),
        )

    def test_classes_and_events_are_the_schemas_in_cxx_and_python(self):
        classes = PROPERTIES["pass_classes"]["anyOf"][0]["required"]
        cxx_classes = re.search(r"kClassNames = \{([^}]*)\}", self.record).group(1)
        self.assertEqual(re.findall(r'"(\w+)"', cxx_classes), classes)
        self.assertEqual(
            threading_cost_object()["properties"]["pairs"]["propertyNames"]["examples"], classes
        )
        events = PROPERTIES["events"]["items"]["examples"]
        class_header = source(AUTOGRAD, "backward_device_class.h")
        self.assertEqual(re.findall(r'k\w+BackwardEventName =\s*"([\w.]+)";', class_header), events)
        fields = source(PACKAGE, "record_fields.py")
        python_events = re.search(r"^EVENTS = \{(.*?)^\}", fields, re.M | re.S).group(1)
        self.assertEqual(re.findall(r'^\s*"([\w.]+)":', python_events, re.M), events)
        python_classes = re.search(r"^CLASSES = \(([^)]*)\)", fields, re.M).group(1)
        self.assertEqual(re.findall(r'"(\w+)"', python_classes), classes)

    def test_a_name_on_one_side_only_fails(self):
        # The checks above find a planted difference.
        planted = self.record.replace('r["pid"] =', 'r["process_id"] =')
        self.assertNotEqual(set(re.findall(r'\br\["(\w+)"\]\s*=', planted)), set(PROPERTIES))
        role = function_body(self.identity, "std::string role()").replace('"agent"', '"launcher"')
        self.assertNotEqual(
            set(re.findall(r'return "(\w+)";', role)), set(PROPERTIES["role"]["examples"])
        )


if __name__ == "__main__":
    run_tests()
