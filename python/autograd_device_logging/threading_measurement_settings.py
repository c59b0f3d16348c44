"""How much the threading-cost measurement measures (Note [Measuring the
cost of single-threaded backward], threading_measurement.py): its Settings,
from measure_threading() or from the package's settings (settings.py)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from .settings import ignoring


@dataclasses.dataclass(frozen=True)
class Settings:
    """How much to measure."""

    #: Probability that a pass after the warm-up starts a pair.
    rate: float = 0.02
    #: Passes never sampled at the start of the process.
    warmup: int = 10
    #: Pairs measured per process, at most (and at most twice as many tried).
    max_pairs: int = 64
    #: Seeds the choices; None: the job's name as the record gives it, else
    #: the rendezvous address, else a random seed (threading_measurement._job_seed).
    seed: Optional[int] = None
    #: Untimed passes run in a timed pass's mode just before it (Note
    #: [Measuring the cost of single-threaded backward]).
    washout: int = 1

    def __post_init__(self):
        if not (0.0 <= self.rate <= 1.0):
            raise ValueError(f"rate must be in [0, 1], not {self.rate}")
        if self.warmup < 0 or self.max_pairs < 0 or self.max_pairs > 10000:
            raise ValueError("warmup must be >= 0 and max_pairs in [0, 10000]")
        if not (0 <= self.washout <= 100):
            raise ValueError(f"washout must be in [0, 100], not {self.washout}")


#: Each knob's type and what it takes (settings.MEASURE_KNOBS names its variable).
_KNOBS = {
    "rate": (float, "use a number from 0 to 1"),
    "warmup": (int, "use a whole number from 0"),
    "max_pairs": (int, "use a whole number from 0 to 10000"),
    "seed": (int, "use a whole number"),
    "washout": (int, "use a whole number from 0 to 100"),
}


def settings_from(package_settings, warn) -> Optional[Settings]:
    """The Settings that AUTOGRAD_DEVICE_LOGGING_MEASURE_THREADING and its
    knobs ask for (as the package's settings read them, settings.py), or None
    when it is off. A bad knob is one warning (through `warn`) and the
    default."""
    if not package_settings.measure_threading:
        return None
    fields = {}
    for field, (name, text) in package_settings.measure_knobs.items():
        try:
            fields[field] = _KNOBS[field][0](text)
            Settings(**fields)
        except ValueError:
            fields.pop(field, None)
            warn(ignoring(name, text, _KNOBS[field][1], getattr(Settings(), field)))
    return Settings(**fields)
