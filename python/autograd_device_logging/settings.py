"""The Python package's settings: every environment variable the package
reads is read here, and every switch goes through one parser.

Note [The package's settings]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The mirror of the library's (Note [The library's settings are read once, at
load], torch/csrc/autograd/settings.h): `read()` returns one frozen Settings,
which the package takes once, when it loads the library (_activation.py), and
hands on; a new switch is one field, one line in read() and one row of
docs/usage.md's table. Switches take vocabulary.ON_WORDS and OFF_WORDS in
any case; unset or empty leaves the default; any other value is one line,
worded as the library words its own (`ignoring()`). The .pth reads the
switch once more at interpreter start-up, before the package can be imported,
and test_record_vocabulary.py holds its words to these.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, Mapping, Optional

from .vocabulary import OFF_WORDS, ON_WORDS

#: The .pth's switch: an off value stops it (and only it) from loading.
SWITCH = "AUTOGRAD_DEVICE_LOGGING"
#: The library to load, in place of the copy next to the package.
LIBRARY = "AUTOGRAD_DEVICE_LOGGING_LIBRARY"
#: The program whose job the processes that this one starts join.
PROGRAM = "AUTOGRAD_DEVICE_LOGGING_PROGRAM"
#: The library's record directory (the library reads it, settings.h; the
#: launcher's --report sets it for the children).
REPORT_DIR = "AUTOGRAD_DEVICE_LOGGING_REPORT_DIR"
#: Pushes the counts over OTLP (otlp_export.py).
OTLP = "AUTOGRAD_DEVICE_LOGGING_OTLP"
#: Measures what single-threaded backward would cost (threading_measurement.py).
MEASURE_THREADING = "AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING"
#: The measurement's knobs: variable -> its field of threading_measurement.Settings.
MEASURE_KNOBS = {
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_RATE": "rate",
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_WARMUP": "warmup",
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_PAIRS": "max_pairs",
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_SEED": "seed",
    "AUTOGRAD_DEVICE_LOGGING_MEASURE_WASHOUT": "washout",
}
#: What a switch takes, for its one line.
SWITCH_TAKES = "use 1, true, yes or on, or 0, false, no or off (any case)"


def parse_switch(value: str) -> Optional[bool]:
    """True or False for a switch word (any case), None for anything else."""
    word = value.lower()
    return True if word in ON_WORDS else False if word in OFF_WORDS else None


def ignoring(name: str, value: str, takes: str, default) -> str:
    """The one wording of a bad value, the library's too."""
    return f"ignoring {name}={value}: {takes}; using the default, {default}."


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the environment asks the package for (the Note)."""

    #: The switch's value as set ("" when unset), and whether it is on.
    switch_value: str = ""
    switch: bool = True
    library: Optional[str] = None
    #: The program a parent passed on ("" when none).
    program: str = ""
    otlp: bool = False
    measure_threading: bool = False
    #: The measurement's knobs as set: field -> (variable, text).
    measure_knobs: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    #: What the OTLP export reads besides the SDK: whether a service name is
    #: given, the endpoint (for its warning), and the scheduler's job ids.
    otel_service_named: bool = False
    otlp_endpoint: str = "http://localhost:4318"
    kubernetes_job_name: str = ""
    slurm_job_id: str = ""
    #: The rendezvous torch.distributed was told ("" when none).
    rendezvous: str = ""


def _switch(env: Mapping[str, str], name: str, default: bool, warn) -> bool:
    value = env.get(name, "")
    if value == "":
        return default
    parsed = parse_switch(value)
    if parsed is None:
        warn(ignoring(name, value, SWITCH_TAKES, "on" if default else "off"))
        return default
    return parsed


def read(
    env: Optional[Mapping[str, str]] = None, warn: Optional[Callable[[str], None]] = None
) -> Settings:
    """The Settings the environment gives now; each bad value is one call of
    `warn` (none: silent)."""
    env = os.environ if env is None else env
    warn = warn or (lambda message: None)
    knobs: Dict[str, tuple] = {
        field: (name, env[name]) for name, field in MEASURE_KNOBS.items() if env.get(name)
    }
    master = (env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", ""))
    return Settings(
        switch_value=env.get(SWITCH, ""),
        switch=_switch(env, SWITCH, True, warn),
        library=env.get(LIBRARY) or None,
        program=env.get(PROGRAM, ""),
        otlp=_switch(env, OTLP, False, warn),
        measure_threading=_switch(env, MEASURE_THREADING, False, warn),
        measure_knobs=knobs,
        otel_service_named=bool(
            env.get("OTEL_SERVICE_NAME")
            or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
        ),
        otlp_endpoint=env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or "http://localhost:4318",
        kubernetes_job_name=env.get("KUBERNETES_JOB_NAME", ""),
        slurm_job_id=env.get("SLURM_JOB_ID", ""),
        rendezvous=f"{master[0]}:{master[1]}" if all(master) else "",
    )


def user_cache_home(env: Optional[Mapping[str, str]] = None) -> str:
    """The user's cache folder, as the XDG base directory specification
    names it: $XDG_CACHE_HOME when it is an absolute path, else ~/.cache."""
    env = os.environ if env is None else env
    home = env.get("XDG_CACHE_HOME", "")
    if os.path.isabs(home):
        return home
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")


def set_for_children(name: str, value: str) -> None:
    """Sets `name` for the processes this one starts, unless it is set."""
    os.environ.setdefault(name, value)


def set_now(name: str, value: str) -> None:
    """Sets `name` for this process's library and its children (the launcher's
    options, before the library loads)."""
    os.environ[name] = value
