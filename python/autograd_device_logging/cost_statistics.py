"""The threading cost's statistics: a process's value from its pairs, a job's
estimate over its independent units, and intervals of known coverage.

Pure functions of numbers: no I/O, no state between calls, no third-party
library, and nothing random (the same records give the same report).
"""

from __future__ import annotations

import functools
import math
from array import array
from operator import itemgetter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# The level the report asks of every interval.
LEVEL = 0.95


# Note [Intervals from order statistics]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An estimate is the median of n independent units' values (Note [What an
# interval is over]). For n independent draws from any continuous
# distribution, the interval from the k-th smallest to the k-th largest draw
# covers that distribution's median with probability exactly
#   1 - 2 P(B <= k - 1),  B ~ Binomial(n, 1/2),
# whatever the distribution: no resampling, no normal approximation. The
# report takes the largest k whose coverage is at least 95% and states that
# coverage, which is what the interval holds (96.9% for 6 units, 97.9% for 9,
# closer to 95% as n grows). Below 6 units no k reaches 95%: the report then
# gives the units' range [min, max], with its own exact coverage (50%, 75%,
# 87.5% and 93.75% for 2 to 5 units), and says that it is below 95%. One unit
# has no interval. test/test_cost_statistics.py shows by simulation, on 2,000
# or more jobs for each n from 1 to 64, that every stated level holds within 2
# points, and that a negative control (no true difference) covers 0 as often.
# A percentile bootstrap of the median, which this replaced, is exactly
# [min, max] for n <= 4 while calling it 95%: it covered 50% at n = 2.
# A log of a probability whose exp() is 0.0 in floats (below about -745).
_NO_PROBABILITY = -800.0


@functools.lru_cache(maxsize=1024)
def order_statistic_interval(n: int, level: float = LEVEL) -> Optional[Tuple[int, float]]:
    """(k, coverage): the interval [k-th smallest, k-th largest] of n units
    and its exact coverage of their distribution's median; k is the largest
    whose coverage is at least `level`, else 1 (the range). None for n < 2."""
    if n < 2:
        return None
    # Binomial(n, 1/2)'s probabilities in floats through lgamma, so that n may
    # be every job of a fleet.
    log_all = n * math.log(2.0)
    log_n = math.lgamma(n + 1)

    def log_p(i: int) -> float:
        return log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) - log_all

    # P(B = i) rises with i up to n / 2, and below e^-800 it is 0.0 in
    # floats: those terms add nothing to the tail, which stays 0.0, so each
    # of their candidates covers 1.0 and the sum starts after them, the same
    # sum to the last bit (at 10^5 jobs, 10^4 terms instead of 5 * 10^4).
    low, high = 0, n // 2
    while low < high:
        middle = (low + high) // 2
        if log_p(middle) < _NO_PROBABILITY:
            low = middle + 1
        else:
            high = middle
    tail = 0.0  # P(B <= k - 1)
    k, coverage = 1, 1.0 - 2.0 * math.exp(-log_all)
    if low > 0:
        k, coverage = low, 1.0
    for candidate in range(low + 1, n // 2 + 1):
        i = candidate - 1
        tail += math.exp(log_p(i))
        c = 1.0 - 2.0 * tail
        if c < level:
            break
        k, coverage = candidate, c
    return k, coverage


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def median_interval(values: Sequence[float], over: str, level: float = LEVEL) -> Optional[dict]:
    """The interval of the median of independent `values` (Note [Intervals
    from order statistics]): {"percent": [low, high], "level": its exact
    coverage, "meets_level": level reached, "units": n, "over": `over`}; None
    for fewer than two values."""
    n = len(values)
    found = order_statistic_interval(n, level)
    if found is None:
        return None
    k, coverage = found
    ordered = sorted(values)
    return {
        "percent": [ordered[k - 1], ordered[n - k]],
        "level": coverage,
        "meets_level": coverage >= level,
        "units": n,
        "over": over,
    }


def process_value(pairs: Sequence[Sequence[int]]) -> Tuple[float, float]:
    """A process's value from its measured pairs (off, on) of durations in
    ns, with multithreading off and on: the median of (off - on) / on in
    percent, and the median of off - on in ns."""
    ratios = sorted([(off - on) / on for off, on in pairs])
    differences = sorted([off - on for off, on in pairs])
    n = len(ratios)
    m = n // 2
    if n % 2:
        return 100.0 * ratios[m], float(differences[m])
    return 50.0 * (ratios[m - 1] + ratios[m]), (differences[m - 1] + differences[m]) / 2.0


# Note [What an interval is over]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An interval is over independent units, and the report names them:
# - A process that is not a rank is one unit: the median over its pairs of
#   (off - on) / on. Its state (the cores its threads run on, the GPU's
#   clocks) moves all of its pairs together, so its pairs are not the sample:
#   a process alone has no interval.
# - The ranks of a job are one unit, one run: the median of their values.
#   They share the measurement's seed (they sample the same passes in the
#   same modes, Note [Measuring the cost of single-threaded backward]) and
#   wait for each other at every all-reduce, so they do not vary
#   independently. A job is one run of its ranks (its name is the run's:
#   Note [Which job a process belongs to], process_identity.cpp); a restarted
#   rank stays in it.
# - A job's estimate is the median over its units, with the interval over
#   them; `(all jobs)` gives each job one vote: the median of the jobs'
#   estimates, with the interval over jobs, so a job of many processes does
#   not outvote one of few.
class ClassCost:
    """What one job's processes found for one device class: each unit's
    value kept as a float, never the pairs."""

    __slots__ = ("rank_values", "process_values", "differences", "pairs")

    def __init__(self):
        self.rank_values = array("d")
        self.process_values = array("d")
        self.differences = array("d")
        self.pairs = 0

    def add(self, value: Tuple[float, float, int], is_rank: bool) -> None:
        percent, difference, pairs = value
        (self.rank_values if is_rank else self.process_values).append(percent)
        self.differences.append(difference)
        self.pairs += pairs

    def plain(self) -> tuple:
        """What it holds as plain values, for take()."""
        return (
            self.rank_values.tobytes(),
            self.process_values.tobytes(),
            self.differences.tobytes(),
            self.pairs,
        )

    def take(self, plain: tuple) -> None:
        """Adds what another ClassCost's plain() holds: the summary keeps
        no order of arrival."""
        rank_values, process_values, differences, pairs = plain
        self.rank_values.frombytes(rank_values)
        self.process_values.frombytes(process_values)
        self.differences.frombytes(differences)
        self.pairs += pairs

    def units(self) -> List[float]:
        values = list(self.process_values)
        if self.rank_values:
            values.append(median(self.rank_values))
        return values

    def over(self) -> str:
        runs = 1 if self.rank_values else 0
        processes = len(self.process_values)
        if runs and processes:
            return "runs and processes"
        return "runs" if runs else "processes"

    def summary(self) -> dict:
        units = self.units()
        return {
            "median_percent": median(units),
            "interval": median_interval(units, self.over()),
            "units": len(units),
            "over": self.over(),
            "processes": len(self.differences),
            "ranks": len(self.rank_values),
            "pairs": self.pairs,
            "median_difference_ms": median(self.differences) / 1e6,
        }


def summaries_of(costs: Dict[str, ClassCost], classes: Sequence[str]) -> Optional[dict]:
    """Per class (the known ones in `classes` order, then any other by name),
    its summary; None when nothing was measured."""
    known = [c for c in classes if c in costs]
    out = {c: costs[c].summary() for c in known + sorted(set(costs) - set(known))}
    return out or None


def over_jobs(job_summaries: List[dict], classes: Sequence[str]) -> Optional[dict]:
    """Per class, one vote per job: the median of the jobs' estimates, the
    interval over jobs, and the totals."""
    per_class: Dict[str, List[tuple]] = {}
    for summary in job_summaries:
        for device_class, c in (summary or {}).items():
            per_class.setdefault(device_class, []).append(
                (
                    c["median_percent"],
                    c["processes"],
                    c["ranks"],
                    c["pairs"],
                    c["median_difference_ms"],
                )
            )
    return over_jobs_of(per_class, classes)


def over_jobs_of(
    per_class: Dict[str, List[tuple]],
    classes: Sequence[str],
    sorted_column: Optional[Callable[[list, int], Optional[list]]] = None,
) -> Optional[dict]:
    """over_jobs, of each class's jobs as (median_percent, processes, ranks,
    pairs, median_difference_ms); `sorted_column(costs, i)`, where given,
    sorts the i-th of each (or gives None: sorted here)."""

    def column(costs: List[tuple], i: int) -> list:
        made = None if sorted_column is None else sorted_column(costs, i)
        return sorted(map(itemgetter(i), costs)) if made is None else made

    known = [c for c in classes if c in per_class]
    out = {}
    for device_class in known + sorted(set(per_class) - set(known)):
        costs = per_class[device_class]
        # Sorted once: median() and median_interval() sort a sorted list in
        # one pass.
        estimates = column(costs, 0)
        out[device_class] = {
            "median_percent": median(estimates),
            "interval": median_interval(estimates, "jobs"),
            "units": len(estimates),
            "over": "jobs",
            "processes": sum(map(itemgetter(1), costs)),
            "ranks": sum(map(itemgetter(2), costs)),
            "pairs": sum(map(itemgetter(3), costs)),
            "median_difference_ms": median(column(costs, 4)),
        }
    return out or None


# Note [Comparing two methods]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# benchmarks/threading_cost.py measures the cost twice in each process: in
# the job (the measurement's pairs of sampled passes) and by an A/B in the
# same process (blocks of passes with multithreading on and off, the k-th
# timed pass of an off block paired with the k-th of the on block next to
# it). Both go through process_value(), so both estimate the same quantity:
# the process's median over pairs of (off - on) / on. A process's placement
# and clocks move both of its values together, so the comparison is over the
# processes' differences (in-job minus A/B, in points): the median
# difference, with the interval between order statistics of the processes
# (Note [Intervals from order statistics]), which covers the median
# difference at its stated level. The verdict is an equivalence test with
# margin m:
# - "agree": the interval lies inside (-m, +m);
# - "differ": the interval lies outside [-m, +m], wholly on one side;
# - otherwise "inconclusive": the data cannot say.
# Each wrong verdict needs the interval to miss the median difference, so
# neither comes more often than 1 - level. The benchmark's margin is half the
# gap it must find (20 points), so that finding the gap and passing no gap
# are equally hard. test/test_cost_statistics.py simulates both errors, and
# the power at the benchmark's size; the benchmark's --power tabulates it by
# the spread of the differences.
def compare_methods(differences: Sequence[float], margin: float) -> dict:
    """The verdict on two methods from each unit's difference between them,
    in points (Note [Comparing two methods]): {"median": the median
    difference, "interval": median_interval() of the differences or None,
    "verdict": "agree", "differ" or "inconclusive", "level": the level the
    verdict holds at (0.0 without an interval), "margin": `margin`}."""
    interval = median_interval(list(differences), "processes")
    verdict, level = "inconclusive", 0.0
    if interval is not None:
        low, high = interval["percent"]
        level = interval["level"]
        if -margin < low and high < margin:
            verdict = "agree"
        elif high < -margin or low > margin:
            verdict = "differ"
    return {
        "median": median(differences) if differences else None,
        "interval": interval,
        "verdict": verdict,
        "level": level,
        "margin": margin,
    }
