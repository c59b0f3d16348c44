# Owner(s): ["module: autograd"]
"""Upstream parity: every scenario of the corpus gets torch's own answer.

From torch 2.14 on, libtorch emits the autograd device events itself.
tools/record_upstream_answers.py ran the corpus of test/backward_scenarios.py
on those releases (without this library) and recorded their events in
test/fixtures/upstream_backward_events.json. Here the same corpus runs under
the pinned torch with this library, each scenario in a fresh child, and
every scenario must give exactly the recorded events: fleet data mixes this
library's events with torch's own, so they must mean the same thing.
"""

import hashlib
import json
import os
import subprocess
import sys
import unittest

import backward_scenarios
from common_device_logging import TEST_DIR
from torch.testing._internal.common_utils import TestCase, run_tests

import torch

REPO = os.path.dirname(TEST_DIR)
BUILD_DIR = os.environ.get("AUTOGRAD_DEVICE_LOGGING_BUILD_DIR", os.path.join(REPO, "build"))
PACKAGE_ROOT = os.path.join(BUILD_DIR, "python")
LIBRARY = os.path.join(PACKAGE_ROOT, "autograd_device_logging", "libautograd_device_logging.so")
ACCELERATOR_LIBRARY = os.path.join(BUILD_DIR, "test", "libautograd_test_accelerator.so")
FIXTURE = os.path.join(TEST_DIR, "fixtures", "upstream_backward_events.json")
SHORT = {
    "torch.autograd.multidevice_backward": "multidevice",
    "torch.autograd.gpu_cpu_backward": "gpu_cpu",
}
SHOWN_DISAGREEMENTS = 3


def load_fixture():
    with open(FIXTURE) as f:
        return json.load(f)


def replay(seeds, devices, reuse_processes):
    """This library's answers for the corpus: one fresh child per scenario, or
    (reuse_processes) Note [Replaying on CUDA in reused processes]."""
    env = dict(os.environ)
    env.update(
        PYTORCH_API_USAGE_STDERR="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=BUILD_DIR,
    )
    env.pop("AUTOGRAD_DEVICE_LOGGING_LIBRARY", None)
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(TEST_DIR, "backward_scenarios.py"),
            f"--seeds={seeds.start}:{seeds.stop}",
            f"--devices={devices}",
            "--with-library",
            *(["--reuse-processes"] if reuse_processes else []),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if proc.returncode != 0:
        raise AssertionError(f"the corpus runner failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines()]


class TestUpstreamParity(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.fixture = load_fixture()
        cls.scenarios = cls.fixture["scenarios"]

    def expected(self, scenario):
        answers = {tuple(events) for events in scenario["events"].values()}
        self.assertEqual(
            len(answers), 1, f"recorded releases disagree on seed {scenario['seed']}: {scenario}"
        )
        return sorted(answers.pop())

    def test_fixture_holds_2400_scenarios_from_2_14_and_2_15(self):
        # tools/record_upstream_answers.py's --scenarios, as recorded.
        self.assertEqual(len(self.scenarios), 2400)
        self.assertEqual(sorted(self.fixture["torch"]), ["2.14.1", "2.15.0"])
        self.assertEqual([s["seed"] for s in self.scenarios], list(range(len(self.scenarios))))
        for scenario in self.scenarios:
            self.assertEqual(sorted(scenario["events"]), ["2.14.1", "2.15.0"])
            self.assertNotIn("error", scenario, "a recorded scenario raised")

    def test_each_seed_still_generates_its_recorded_program(self):
        # A generator change makes the recorded answers belong to other
        # programs: re-record (tools/record_upstream_answers.py).
        self.assertEqual(self.fixture["generator_version"], backward_scenarios.GENERATOR_VERSION)
        changed = [
            s["seed"]
            for s in self.scenarios
            if hashlib.sha256(backward_scenarios.generate(s["seed"]).encode()).hexdigest()[:16]
            != s["code_sha256"]
        ]
        self.assertEqual(changed, [], "the generator changed: re-record the fixture")

    def test_corpus_covers_every_kind_of_pass(self):
        programs = [backward_scenarios.generate(s["seed"]) for s in self.scenarios]
        features = {
            "device moves": ".to(d",
            "multi-output Function": "MultiDeviceOutputs.apply",
            "no_grad island": "torch.no_grad()",
            "detach island": ".detach()",
            "retain_graph second pass": "retain_graph=True",
            "double backward": "create_graph=True",
            "reentrant checkpoint": "use_reentrant=True",
            "non-reentrant checkpoint": "use_reentrant=False",
            "autograd.grad": "torch.autograd.grad(",
            "backward(inputs=)": ".backward(inputs=",
            "several roots": "torch.autograd.backward([",
            "meta-only": "device=meta",
        }
        for feature, text in features.items():
            count = sum(text in program for program in programs)
            self.assertGreaterEqual(count, 20, f"{feature}: {count} scenarios")
        # Non-leaf inputs to grad() / backward(inputs=), and roots on each device.
        non_leaf_inputs = sum(
            any(
                "v" in name
                for line in program.splitlines()
                if "inputs=" in line or "autograd.grad(" in line
                for name in line.split("[", 1)[1].split("]")[0].split(", ")
            )
            for program in programs
        )
        self.assertGreaterEqual(non_leaf_inputs, 20)
        for device in ("cpu", "d0", "d1", "meta"):
            roots = sum(f".sum().to({device})\n" in program for program in programs)
            self.assertGreaterEqual(roots, 20, f"roots on {device}: {roots}")

    def assert_replay_agrees(self, devices, reuse_processes=False):
        answers = replay(range(len(self.scenarios)), devices, reuse_processes)
        self.assertEqual([a["seed"] for a in answers], [s["seed"] for s in self.scenarios])
        disagreements = []
        for scenario, answer in zip(self.scenarios, answers):
            got = sorted(SHORT[e] for e in answer["events"])
            if answer["error"] is not None or not answer["library_active"]:
                got = f"{got}, error={answer['error']}, library active={answer['library_active']}"
            if got != self.expected(scenario):
                disagreements.append((scenario, got))
        shown = "\n".join(
            f"--- seed {s['seed']}: torch {sorted(s['events'])} emit {self.expected(s)}, "
            f"this library: {got}\n"
            + backward_scenarios.program_text(backward_scenarios.generate(s["seed"]), devices)
            for s, got in disagreements[:SHOWN_DISAGREEMENTS]
        )
        self.assertEqual(
            len(disagreements),
            0,
            f"{len(disagreements)} of {len(answers)} scenarios differ from torch's own "
            f"events on {devices}; the first {min(len(disagreements), SHOWN_DISAGREEMENTS)}:\n"
            + shown,
        )

    def require_built(self):
        for path in (LIBRARY, ACCELERATOR_LIBRARY):
            if not os.path.exists(path):
                self.fail(f"{path} is missing: build the project first (README)")

    def test_replay_on_the_test_accelerator_agrees_with_upstream(self):
        self.require_built()
        self.assert_replay_agrees("testaccel")

    def test_replay_in_reused_processes_agrees_with_upstream(self):
        # The mode the CUDA replay uses, checked where fresh processes are cheap.
        self.require_built()
        self.assert_replay_agrees("testaccel", reuse_processes=True)

    @unittest.skipIf(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2, "needs 2 CUDA devices"
    )
    def test_replay_on_cuda_agrees_with_upstream(self):
        self.assert_replay_agrees("cuda", reuse_processes=True)


if __name__ == "__main__":
    run_tests()
