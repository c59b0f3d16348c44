"""Records torch's own answers for the backward-scenario corpus.

    python tools/record_upstream_answers.py [--scenarios 2400] [--versions 2.15.0 2.14.1]

From torch 2.14 on, libtorch emits the autograd device events itself. For
each release named, this installs it from PyPI into a cached venv
(tools/setup_env.sh), builds the test accelerator against it (outside the
checkout), runs every scenario of test/backward_scenarios.py there without
this library, each in a fresh child, and writes what that torch printed into
test/fixtures/upstream_backward_events.json: per scenario, its seed, the
hash of its program, and per release the events, the error if any, and the
events of the devices its passes actually ran on (docs/semantics.md).

test/test_upstream_parity.py replays the corpus under the pinned torch with
this library and requires the same events as every recorded release.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import tempfile

import scenario_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(REPO, "test", "fixtures", "upstream_backward_events.json")


def venv_for(version):
    # The same pins as tools/check_other_torch.sh, so the two share a venv.
    requirements = os.path.join(tempfile.mkdtemp(), f"requirements-torch-{version}.txt")
    with open(requirements, "w") as f:
        f.write(
            f"torch=={version}\nnumpy==2.2.6\n"
            "# builds the package with --no-build-isolation\nsetuptools>=70.1\n"
        )
    env = dict(os.environ, AUTOGRAD_DEVICE_LOGGING_REQUIREMENTS=requirements)
    venv = subprocess.run(
        ["bash", os.path.join(REPO, "tools", "setup_env.sh")],
        env=env,
        check=True,
        text=True,
        stdout=subprocess.PIPE,
    ).stdout.strip()
    return os.path.join(venv, "bin", "python")


def build_accelerator(python, build_dir):
    env = dict(
        os.environ,
        AUTOGRAD_DEVICE_LOGGING_BUILD_DIR=build_dir,
        AUTOGRAD_DEVICE_LOGGING_TARGETS="autograd_test_accelerator",
        AUTOGRAD_DEVICE_LOGGING_CMAKE_ARGS="-DAUTOGRAD_DEVICE_LOGGING_BENCHMARK_ON_NATIVE_TORCH=ON",
    )
    subprocess.run(
        ["bash", os.path.join(REPO, "tools", "build.sh"), python],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", type=int, default=2400)
    parser.add_argument("--versions", nargs="+", default=["2.15.0", "2.14.1"])
    parser.add_argument("--output", default=FIXTURE)
    args = parser.parse_args()

    scenarios = [
        {"seed": seed, "code_sha256": None, "events": {}, "executed_events": {}, "error": {}}
        for seed in range(args.scenarios)
    ]
    generator_version = None
    versions = {}
    for version in args.versions:
        python = venv_for(version)
        installed = subprocess.run(
            [python, "-c", "import torch; print(torch.__version__)"],
            check=True,
            text=True,
            stdout=subprocess.PIPE,
        ).stdout.strip()
        build_dir = os.path.join(
            os.path.expanduser("~"), ".cache", "autograd_device_logging", f"build-torch-{version}"
        )
        print(f"== torch {installed}: building the test accelerator in {build_dir}", flush=True)
        build_accelerator(python, build_dir)
        print(f"== torch {installed}: {args.scenarios} scenarios", flush=True)
        answers = scenario_corpus.run_corpus(python, build_dir, args.scenarios, with_library=False)
        assert [a["seed"] for a in answers] == list(range(args.scenarios)), "missing answers"
        version_here = scenario_corpus.generator_version(python)
        assert generator_version in (None, version_here), "the corpus changed between releases"
        generator_version = version_here
        versions[version] = installed
        for scenario, answer in zip(scenarios, answers):
            assert scenario["code_sha256"] in (None, answer["code_sha256"]), scenario["seed"]
            scenario["code_sha256"] = answer["code_sha256"]
            scenario["events"][version] = answer["events"]
            scenario["executed_events"][version] = answer["executed_events"]
            scenario["error"][version] = answer["error"]
        errors = sum(answer["error"] is not None for answer in answers)
        print(f"   scenarios that raised: {errors}", flush=True)

    disagree = [s["seed"] for s in scenarios if len({tuple(e) for e in s["events"].values()}) > 1]
    print(f"== releases disagree on {len(disagree)} scenario(s): {disagree[:20]}")
    for scenario in scenarios:
        if not any(scenario["error"].values()):
            del scenario["error"]
    header = {
        "what": "torch's own autograd device events for test/backward_scenarios.py",
        "written_by": "python tools/record_upstream_answers.py",
        "recorded": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()} {platform.system()}, "
        f"Python {platform.python_version()}",
        "generator_version": generator_version,
        "devices": "cpu, testaccel:0, testaccel:1 (test/cpp/test_accelerator)",
        "torch": versions,
        "releases_disagree_on": disagree,
    }
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        # One scenario per line: reviewable diffs when the corpus is re-recorded.
        f.write(json.dumps(header, indent=1)[:-2] + ',\n "scenarios": [\n')
        f.write(",\n".join("  " + json.dumps(s, sort_keys=True) for s in scenarios))
        f.write("\n ]\n}\n")
    json.load(open(args.output))  # what was written parses
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
