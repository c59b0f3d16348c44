"""The fleet report's counts: records in, one summary per job and over all
jobs out. Everything lives in one FleetTotals, made per report: nothing
outlives the call that made it."""

from __future__ import annotations

import json
import marshal
import re
import sys
from bisect import bisect_left
from collections import Counter, defaultdict
from itertools import chain
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from .cost_statistics import LEVEL, ClassCost, order_statistic_interval, over_jobs_of, summaries_of
from .file_index import group_of
from .record_fields import (
    CLASSES,
    EVENT_BITS,
    EVENT_MASK,
    EVENTS,
    UNKNOWN_PLACEMENT,
    Record,
    placement_key,
)

try:
    from ._record_files import (
        count_records,
        cross_jobs,
        finish_jobs,
        kept_lines,
        sorted_column,
        sum_lights,
    )
except ImportError:  # Note [Reading the files in compiled code], file_index.py
    count_records = cross_jobs = finish_jobs = kept_lines = sorted_column = sum_lights = None

ALL_JOBS = "(all jobs)"
# Why a torchrun agent that joins its workers' job is left out of its counts
# (Note [An agent joins its workers' job]).
AGENT_REASON = "torchrun agent"

# Note [A restarted rank counts once, under its newest release]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A rank's records (a restart keeps one more) fold into one small int: the
# union of their events in the low two bits, the number of a torch release
# above them. The release is the newest of the rank's records' (by the
# numbers of its version, then by name; the report runs on the standard
# library alone, which has no PEP 440 parser, so a pre-release such as
# 2.6.0a0 counts as after 2.6.0): a rule on the records, not on the order
# they are read in, so the report is the same whichever process reads which
# file, and whether a record comes from its file or from the cache (Note [The
# report's cache], report_cache.py). A rank restarted on an upgraded torch
# counts under the upgrade. One short string and one small int per rank keep
# a million ranks in the report's memory target.
_RELEASE_NUMBERS = re.compile(r"[0-9]+")


def release_order(name: str) -> tuple:
    """A torch release's place among releases: 2.10.0 after 2.9.1."""
    return (tuple(int(n) for n in _RELEASE_NUMBERS.findall(name.split("+")[0])), name)


def _newest(old: int, new: int, names: List[str]) -> int:
    """One rank's two states as one (Note [A restarted rank counts once,
    under its newest release])."""
    events = (old | new) & EVENT_MASK
    a, b = old >> 2, new >> 2
    if a != b and release_order(names[b]) > release_order(names[a]):
        a = b
    return a << 2 | events


class JobTotals:
    """One job's counts, kept as the records stream by."""

    __slots__ = (
        "ranks",
        "other_releases",
        "passes",
        "counting",
        "left_out",
        "costs",
        "others_by_name",
    )

    def __init__(self):
        # "host\0rank" -> events | release number << 2: a restarted rank
        # counts once (Note [A restarted rank counts once, under its newest
        # release]).
        self.ranks: Dict[str, int] = {}
        # Per torch release, the processes that are not ranks: [processes,
        # with each event].
        self.other_releases: Dict[str, List[int]] = {}
        self.passes = [0] * len(CLASSES)
        self.counting = 0
        self.left_out: Counter = Counter()
        # class -> what the job's processes measured.
        self.costs: Dict[str, ClassCost] = {}
        # What only records of a newer minor version hold (Note [A newer
        # minor version adds fields and values], record_reader.py), made when
        # first needed: {"rank events": {rank key: {event}}, "events":
        # Counter of the other processes' events, "passes": Counter of passes
        # per class}.
        self.others_by_name: Optional[dict] = None

    def _by_name(self) -> dict:
        if self.others_by_name is None:
            self.others_by_name = {"rank events": {}, "events": Counter(), "passes": Counter()}
        return self.others_by_name

    def add(
        self, r: Record, release: int, names: List[str], placement: Optional[str] = None
    ) -> bool:
        """Counts `r`, whose torch is release number `release` (of the
        release `names`); True when it is a process other than a rank. With a
        `placement` key, its threading cost counts under "CLASS [PLACEMENT]"
        (Note [Grouping by where the threads ran], record_fields.py)."""
        if r.disabled_reason:
            self.left_out["disabled: " + r.disabled_reason] += 1
            return False
        if not r.ran_backward:
            self.left_out["no backward pass"] += 1
            return False
        is_rank = r.role == "rank" and r.rank is not None
        if r.threading_cost:
            for device_class, value in r.threading_cost.items():
                if placement is not None:
                    device_class = f"{device_class} [{placement}]"
                cost = self.costs.get(device_class)
                if cost is None:
                    cost = self.costs[device_class] = ClassCost()
                cost.add(value, is_rank)
        if r.pass_classes is not None:
            self.counting += 1
            passes = self.passes
            for i, n in enumerate(r.pass_classes):
                passes[i] += n
            if r.other_classes:
                self._by_name()["passes"].update(r.other_classes)
        if is_rank:
            key = f"{r.host}\0{r.rank}"
            state = r.events | release << 2
            old = self.ranks.get(key)
            self.ranks[key] = state if old is None else _newest(old, state, names)
            if r.other_events:
                self._by_name()["rank events"].setdefault(key, set()).update(r.other_events)
            return False
        if r.other_events:
            self._by_name()["events"].update(r.other_events)
        row = self.other_releases.get(r.torch)
        if row is None:
            row = self.other_releases[r.torch] = _release_row()
        row[0] += 1
        for i, bit in enumerate(EVENT_BITS.values()):
            row[1 + i] += bool(r.events & bit)
        return True

    def plain(self) -> tuple:
        """The counts as plain values (marshal's types), for take(); what
        is empty or zero as None or 0, which take() passes over: a part
        holds many jobs of which a process read one record or two."""
        by_name = self.others_by_name
        costs = self.costs
        return (
            self.ranks,
            self.other_releases or None,
            self.passes if self.counting else None,
            self.counting,
            dict(self.left_out) if self.left_out else None,
            {c: cost.plain() for c, cost in costs.items()} if costs else None,
            (
                None
                if by_name is None
                else (by_name["rank events"], dict(by_name["events"]), dict(by_name["passes"]))
            ),
        )

    def take(self, plain: tuple, numbers: Optional[List[int]], names: List[str]) -> None:
        """Adds the counts of another process's totals of this job, as
        plain() gave them (Note [Reading a fleet in parallel],
        fleet_report.py); their release number i is numbers[i] here (of the
        release `names`; None: the same numbers)."""
        theirs, other_releases, passes, counting, left_out, costs, by_name = plain
        if theirs:
            if numbers is not None:
                theirs = {key: numbers[s >> 2] << 2 | s & EVENT_MASK for key, s in theirs.items()}
            ranks = self.ranks
            if ranks.keys().isdisjoint(theirs):
                ranks.update(theirs)
            else:
                for key, state in theirs.items():
                    old = ranks.get(key)
                    ranks[key] = state if old is None else _newest(old, state, names)
        if other_releases:
            mine = self.other_releases
            for release, row in other_releases.items():
                old = mine.get(release)
                mine[release] = row if old is None else [a + b for a, b in zip(old, row)]
        if counting:
            self.counting += counting
            self.passes = [a + b for a, b in zip(self.passes, passes)]
        if left_out:
            mine = self.left_out
            for reason, n in left_out.items():
                mine[reason] += n
        if costs:
            for device_class, cost in costs.items():
                mine = self.costs.get(device_class)
                if mine is None:
                    mine = self.costs[device_class] = ClassCost()
                mine.take(cost)
        if by_name is not None:
            rank_events, events, passes_by_name = by_name
            mine = self._by_name()
            for key, names_of_rank in rank_events.items():
                mine["rank events"].setdefault(key, set()).update(names_of_rank)
            mine["events"].update(events)
            mine["passes"].update(passes_by_name)

    def ranks_by_release(self, names: List[str]) -> Dict[str, List[int]]:
        """{torch release: [ranks, with each event]}, each rank under the
        newest release of its records."""
        out: Dict[str, List[int]] = defaultdict(_release_row)
        # A rank's state takes few values: count them once (a dict, not a
        # Counter, whose making costs more than counting a job's ranks).
        states: Dict[int, int] = {}
        for state in self.ranks.values():
            states[state] = states.get(state, 0) + 1
        for state, ranks in states.items():
            row = out[names[state >> 2]]
            row[0] += ranks
            for i, bit in enumerate(EVENT_BITS.values()):
                if state & bit:
                    row[1 + i] += ranks
        return out

    def summary(self, by_release: Dict[str, List[int]]) -> dict:
        """The job's summary; `by_release` is ranks_by_release(names)."""
        processes = len(self.ranks)
        with_event = [0] * len(EVENTS)
        for row in self.other_releases.values():
            processes += row[0]
            with_event = [a + b for a, b in zip(with_event, row[1:])]
        for row in by_release.values():
            with_event = [a + b for a, b in zip(with_event, row[1:])]
        processes_with = dict(zip(EVENTS.values(), with_event))
        passes = dict(zip(CLASSES, self.passes)) if self.counting else None
        if self.others_by_name is not None:
            by_name = self.others_by_name
            events = Counter(by_name["events"])
            for names_of_rank in by_name["rank events"].values():
                events.update(names_of_rank)
            processes_with.update(sorted(events.items()))
            if passes is not None:
                passes.update(sorted(by_name["passes"].items()))
        return {
            "processes": processes,
            "ranks": len(self.ranks),
            "processes_with": processes_with,
            "passes_per_class": passes,
            "processes_counting_passes": self.counting,
            "torch": sorted({*self.other_releases, *by_release}),
            "left_out": dict(sorted(self.left_out.items())),
            "threading_cost": summaries_of(self.costs, CLASSES),
        }


# A job's part of the report, made from its records alone (FleetTotals.
# results): (its summary, None when it counted no process; {torch release:
# [processes, with each event]}; the ranks' parents its ranks name, as
# (host, pid, start time), sorted; its agents, likewise (sorted: a part does
# not depend on the order its records were counted in); the records
# filtered out).
JobResult = Tuple[Optional[dict], Dict[str, List[int]], tuple, tuple, int]


class FleetTotals:
    """A report's counts, each kept with the job of the records it counts
    (Note [A job's part of the report]), and what was skipped."""

    def __init__(
        self,
        since: Optional[str] = None,
        until: Optional[str] = None,
        jobs: Optional[List[str]] = None,
        by_placement: bool = False,
    ):
        self.by_placement = by_placement
        # What each placement seen reads as: a fleet has few.
        self.placement_keys: Dict[Optional[tuple], str] = {}
        self.since, self.until = since, until
        self.wanted = set(jobs) if jobs else None
        self.filtering = bool(since or until or self.wanted is not None)
        self.jobs: Dict[str, JobTotals] = defaultdict(JobTotals)
        # Torch releases by number, so that a rank's state is one small int.
        self.release_numbers: Dict[str, int] = {}
        self.release_names: List[str] = []
        self.skipped: Counter = Counter()
        # Per job, the records left out by --since, --until or --job.
        self.filtered: Counter = Counter()
        # Note [An agent joins its workers' job]
        # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
        # torchrun's elastic agent imports torch, so it keeps a record, but its
        # run id (the workers' job) is made after it started: a --standalone
        # rendezvous draws it at random, and it reaches only the workers'
        # environment. So the agent's record names the job its own start-up
        # gave it (the program at the host), which is no job of anyone's. Each
        # record of 2.3 on names its parent as it started (pid and start time,
        # Note [A process's identity is decided once, at start-up],
        # process_identity.h), and the agent is the ranks' parent: an agent
        # whose (host, pid, start time) is a rank's parent is counted in that
        # rank's job, and in its own only where no rank names it (its workers
        # kept no record, or an older library wrote them). The start time
        # keeps a reused pid from joining the wrong job. Ranks of two jobs
        # naming one parent is no torchrun's doing: the smaller job name
        # takes it. Agents are few, and a rank adds one entry at most: memory
        # still grows with the ranks. Each job keeps the parents its ranks
        # name and its own agents (Note [A job's part of the report]); who
        # joins whom is decided once every job is counted (assemble).
        # job -> {(host, pid, start time)} its ranks name as their parent.
        self.parents: Dict[str, set] = {}
        # job -> [(host, pid, start time)] of the agents whose record names it.
        self.agents: Dict[str, list] = {}

    def _release(self, name: str) -> int:
        number = self.release_numbers.get(name)
        if number is None:
            number = self.release_numbers[name] = len(self.release_names)
            self.release_names.append(name)
        return number

    def add(self, r: Record) -> None:
        if r.role == "agent":
            # Its job is known once every rank is read; --job applies then.
            if self.filtering and self._started_outside(r):
                self.filtered[r.job] += 1
            else:
                agents = self.agents.get(r.job)
                if agents is None:
                    agents = self.agents[_kept(r.job)] = []
                agents.append((_kept(r.host), r.pid, _kept(r.start_time)))
            return
        if r.role == "rank" and r.parent is not None and r.parent[1] is not None:
            named = self.parents.get(r.job)
            if named is None:
                named = self.parents[_kept(r.job)] = set()
            named.add((_kept(r.host), r.parent[0], _kept(r.parent[1])))
        if self.filtering and self._filtered_out(r):
            self.filtered[r.job] += 1
            return
        release = self.release_numbers.get(r.torch)
        if release is None:
            release = self._release(r.torch)
        placement = None
        if self.by_placement and r.threading_cost:
            placement = self.placement_keys.get(r.placement)
            if placement is None:
                placement = self.placement_keys[r.placement] = (
                    UNKNOWN_PLACEMENT if r.placement is None else placement_key(*r.placement)
                )
        self.jobs[r.job].add(r, release, self.release_names, placement)

    def add_all(self, records: list) -> None:
        """add() of each of `records`, the plain ones in compiled code where
        built (Note [Counting the plain records in compiled code],
        record_counting.cpp): with no filter and no grouping by
        placement, where add() filters and keys first."""
        if count_records is None or self.filtering or self.by_placement:
            for r in records:
                self.add(r)
            return
        count_records(
            records,
            self.add,
            self.jobs,
            self.parents,
            self.release_numbers,
            ClassCost,
            len(EVENTS),
        )

    def _counted_jobs(self) -> List[str]:
        """The jobs that have counts. Taken once: the first key of a dict
        whose first keys were popped is found past every one of them, so
        asking for it after each pop costs a pass over all the jobs popped
        (a second of a report of 55k jobs)."""
        return list(dict.fromkeys([*self.jobs, *self.parents, *self.agents, *self.filtered]))

    def drain(self, jobs_per_part: int = 1000) -> Iterator[tuple]:
        """The counts as parts of plain values (marshal's types), each with
        at most `jobs_per_part` jobs, for another process's take(); it
        leaves the totals empty, as new with the same options. The jobs'
        counts go as their parts are made, so that they are never held
        twice."""
        names = list(self.release_names)
        counted = self._counted_jobs()
        for start in range(0, len(counted), jobs_per_part):
            jobs = []
            for job in counted[start : start + jobs_per_part]:
                t = self.jobs.pop(job, None)
                jobs.append(
                    (
                        job,
                        None if t is None else t.plain(),
                        self.parents.pop(job, None),
                        self.agents.pop(job, None),
                        self.filtered.pop(job, 0),
                    )
                )
            yield (names, jobs, None)
        skipped = dict(self.skipped)
        self.skipped.clear()  # in place: a reader may count into it
        yield (names, [], skipped)

    def take(self, part: tuple) -> None:
        """Adds a part of another process's counts, made from other files
        with the same options (Note [Reading a fleet in parallel],
        fleet_report.py): every count is a sum, a union or a rule on the
        records, so the report is the one a single process would make."""
        release_names, jobs, skipped = part
        numbers = [self._release(name) for name in release_names]
        if numbers == list(range(len(numbers))):
            numbers = None
        names = self.release_names
        for job, plain, parents, agents, filtered in jobs:
            if plain is not None:
                self.jobs[job].take(plain, numbers, names)
            if parents:
                self.parents.setdefault(job, set()).update(parents)
            if agents:
                self.agents.setdefault(job, []).extend(agents)
            if filtered:
                self.filtered[job] += filtered
        if skipped:
            self.skipped.update(skipped)

    def _filtered_out(self, r: Record) -> bool:
        return (self.wanted is not None and r.job not in self.wanted) or self._started_outside(r)

    def _started_outside(self, r: Record) -> bool:
        since, until = self.since, self.until
        return bool(
            (since or until)
            and (
                r.start_time is None
                or (since is not None and r.start_time < since)
                or (until is not None and r.start_time > until)
            )
        )

    # Note [A job's part of the report]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Everything the report says is made from per-job parts, each a function
    # of that job's records alone (JobResult): the job's summary, its
    # processes per torch release, the parents its ranks name, its agents
    # and its records filtered out. Only assemble() looks across jobs: which
    # agent joins which job (Note [An agent joins its workers' job]), and
    # the sums over all jobs. So a job whose records are unchanged keeps its
    # part from the last report (Note [The report's cache], report_cache.py),
    # and a report made from some parts kept and some made anew is the
    # report a fresh read makes: test_report_cache.py holds the two equal
    # under random changes.
    def results(self) -> Dict[str, JobResult]:
        """Each job's part (JobResult); the counts are spent making them,
        so that the two are never all held at once."""
        names = self.release_names
        return {job: self.result(job, names) for job in self._counted_jobs()}

    def result(self, job: str, names: List[str]) -> JobResult:
        """`job`'s part (JobResult), its counts popped; `names` are
        release_names."""
        t = self.jobs.pop(job, None)
        summary, rows = None, {}
        if t is not None:
            by_release = t.ranks_by_release(names)
            summary = t.summary(by_release)
            rows = dict(by_release)
            for release, row in t.other_releases.items():
                old = rows.get(release)
                rows[release] = row if old is None else [a + b for a, b in zip(old, row)]
        return (
            summary,
            rows,
            tuple(sorted(self.parents.pop(job, ()))),
            tuple(sorted(self.agents.pop(job, ()))),
            self.filtered.pop(job, 0),
        )

    def report(self) -> dict:
        """{"jobs": {job: summary}, "releases": {torch: counts}, "skipped":
        {reason: n}, "filtered": n}; the per-job counts are spent making it."""
        return assemble(self.results(), self.skipped, self.wanted)


# A job's part as the cache keeps it (Note [A job's part of the report]):
# JobResult's summary in marshal (decoded only where needed), its release
# rows, parents, agents and filtered records as in JobResult; its light
# (light_of: what the row for all jobs adds up); its JSON line, and the
# agents that joined it when the line was made (-1: none made); the group
# of its records (file_index.group_of: Note [A job's group is kept with its
# part], fleet_report.py).
KeptJob = Tuple[
    Optional[bytes],
    Dict[str, List[int]],
    tuple,
    tuple,
    int,
    Optional[tuple],
    Optional[str],
    int,
    int,
]


def kept_job(job: str, result: JobResult, line: bool = False) -> KeptJob:
    """A job's part made now, as the cache keeps it; with `line`, its JSON
    line too, made for its own agents joining it (Note [An agent joins its
    workers' job]: they do unless a rank of another job names one), which
    Assembled.line takes where those are the agents that joined."""
    summary = result[0]
    if summary is None:
        return (None, *result[1:5], None, None, -1, group_of(job))
    made, joined = None, -1
    if line:
        joined = len(result[3])
        made = _encode(_with_agents(summary, joined))
    return (
        marshal.dumps(summary),
        *result[1:5],
        light_of(summary),
        made,
        joined,
        group_of(job),
    )


def finished_jobs(totals: "FleetTotals") -> Dict[str, KeptJob]:
    """Every job's part of `totals`, its line made (kept_job), as plain
    values; the counts are spent making them (the plain ones' in compiled
    code: Note [The jobs' parts made in compiled code],
    job_finishing.cpp)."""
    names = totals.release_names
    if finish_jobs is None:
        return {job: kept_job(job, result, True) for job, result in totals.results().items()}
    out: Dict[str, KeptJob] = {}
    finish_jobs(
        totals._counted_jobs(),
        totals.jobs,
        totals.parents,
        totals.agents,
        totals.filtered,
        names,
        lambda job: kept_job(job, totals.result(job, names), True),
        out,
        _FINISHING_SHAPE,
    )
    return out


# finish_jobs' shape: the events' short names, the classes, the interval's
# order statistics and level, the group of a job, and the reason an agent
# joining a job is left out (_with_agents).
_FINISHING_SHAPE = (
    tuple(EVENTS.values()),
    tuple(CLASSES),
    order_statistic_interval,
    LEVEL,
    group_of,
    AGENT_REASON,
)


def light_of(summary: dict) -> tuple:
    """What the row for all jobs takes of a job's summary (before any agent
    joined it), as plain values."""
    passes, costs = summary["passes_per_class"], summary["threading_cost"]
    return (
        summary["processes"],
        summary["ranks"],
        tuple(summary["processes_with"].items()),
        None if passes is None else tuple(passes.items()),
        summary["processes_counting_passes"],
        tuple(summary["torch"]),
        tuple(summary["left_out"].items()),
        (
            None
            if costs is None
            else tuple(
                (
                    c,
                    (
                        v["median_percent"],
                        v["processes"],
                        v["ranks"],
                        v["pairs"],
                        v["median_difference_ms"],
                    ),
                )
                for c, v in costs.items()
            )
        ),
    )


def _with_agents(summary: dict, joined: int) -> dict:
    """`summary` with `joined` torchrun agents left out (Note [An agent joins
    its workers' job])."""
    if not joined:
        return summary
    left_out = dict(summary["left_out"])
    left_out[AGENT_REASON] = left_out.get(AGENT_REASON, 0) + joined
    return dict(summary, left_out=dict(sorted(left_out.items())))


def _encode(value) -> str:
    return _ENCODE(value)


_ENCODE = json.JSONEncoder(sort_keys=True).encode
_NO_COUNTS: Optional[tuple] = None


def _no_counts() -> Tuple[bytes, tuple]:
    """The summary of a job that counted no process, in marshal, and its
    light: a job only agents joined."""
    global _NO_COUNTS
    if _NO_COUNTS is None:
        summary = JobTotals().summary({})
        _NO_COUNTS = (marshal.dumps(summary), light_of(summary))
    return _NO_COUNTS


class Assembled:
    """The report of the jobs' parts (Note [A job's part of the report]) and
    the files skipped, for --job `wanted` (None: every job): what crosses
    jobs is decided here, each job's summary is decoded only when asked
    for, and its JSON line made only when its part or its agents changed."""

    def __init__(self, jobs: Dict[str, KeptJob], skipped: Counter, wanted: Optional[set]):
        self.jobs = jobs
        # Note [Assembling the report in compiled code]
        cross = _cross_jobs if cross_jobs is None else cross_jobs
        joined, filtered, releases, self.order = cross(jobs, wanted, _release_row())
        self.joined = Counter(joined)
        self.everything = self._everything() if self.order else None
        # Each job's line, in order, once kept() made them all.
        self.made: Optional[List[str]] = None
        # The jobs whose parts line() replaced, their lines made again (Note
        # [The jobs whose parts are new], report_cache.py).
        self.relined: List[str] = []
        self.fields = {
            "releases": {
                release: {
                    "processes": row[0],
                    "processes_with": dict(zip(EVENTS.values(), row[1:])),
                }
                for release, row in sorted(releases.items())
            },
            "skipped": dict(sorted(skipped.items())),
            "filtered": filtered,
        }

    def _counts(self, job: str) -> Tuple[bytes, tuple]:
        """The job's summary in marshal and its light; a job that counted
        no process has those of no counts."""
        kept = self.jobs[job]
        return _no_counts() if kept[0] is None else (kept[0], kept[5])

    def _everything(self) -> dict:
        """The row for all jobs: the sums of the jobs' lights, in the
        jobs' order (a name's place is where it first appears), and the
        threading cost with one vote per job (cost_statistics.over_jobs)."""
        # Note [Assembling the report in compiled code]
        add = _sum_lights if sum_lights is None else sum_lights
        no_passes = tuple((c, 0) for c in CLASSES)
        processes, ranks, processes_with, passes, counting, torch, left_out, per_class = add(
            self.jobs, self.order, _no_counts()[1], no_passes
        )
        left_out = Counter(left_out)
        agents = sum(self.joined.values())
        if agents:
            left_out[AGENT_REASON] += agents
        return {
            "processes": processes,
            "ranks": ranks,
            "processes_with": processes_with,
            "passes_per_class": passes if counting else None,
            "processes_counting_passes": counting,
            "torch": sorted(torch),
            "left_out": dict(sorted(left_out.items())),
            # Note [A column of votes sorted in compiled code],
            # report_assembly.cpp
            "threading_cost": over_jobs_of(per_class, CLASSES, sorted_column),
        }

    def summary(self, job: str) -> dict:
        if job == ALL_JOBS:
            return self.everything
        return _with_agents(marshal.loads(self._counts(job)[0]), self.joined.get(job, 0))

    def line(self, job: str) -> str:
        """The job's summary as JSON (sorted keys, one line)."""
        if job == ALL_JOBS:
            return _encode(self.everything)
        kept = self.jobs[job]
        joined = self.joined.get(job, 0)
        if kept[6] is not None and kept[7] == joined:
            return kept[6]
        line = _encode(self.summary(job))
        self.jobs[job] = (*kept[:6], line, joined, *kept[8:])
        self.relined.append(job)
        return line

    def lines(self, jobs: List[str]) -> List[str]:
        """line(job) of each of `jobs` (a list), in one pass: where the line
        kept is for the agents that joined the job now, as it is."""
        if kept_lines is not None:
            # Note [The lines kept are taken in one call], report_assembly.cpp
            out, again = kept_lines(self.jobs, jobs, self.joined, ALL_JOBS)
            for i in again:
                out[i] = self.line(jobs[i])
            return out
        kept, joined, out = self.jobs, self.joined, []
        for job in jobs:
            part = kept.get(job)
            if (
                part is not None
                and part[6] is not None
                and part[7] == joined.get(job, 0)
                and job != ALL_JOBS
            ):
                out.append(part[6])
            else:
                out.append(self.line(job))
        return out

    def names(self) -> List[str]:
        """The report's jobs, sorted, the row for all jobs among them."""
        return sorted(self.order + [ALL_JOBS]) if self.order else []

    def rows(self) -> Tuple[List[str], List[str]]:
        """(names(), the line of each): the lines kept() made, where it
        did, with the row for all jobs in its place (the jobs are in order:
        cross_jobs)."""
        if not self.order:
            return [], []
        made = self.lines(self.order) if self.made is None else self.made
        at = bisect_left(self.order, ALL_JOBS)
        return (
            [*self.order[:at], ALL_JOBS, *self.order[at:]],
            [*made[:at], self.line(ALL_JOBS), *made[at:]],
        )

    def report(self) -> dict:
        """{"jobs": {job: summary}, "releases": {torch: counts}, "skipped":
        {reason: n}, "filtered": n}."""
        jobs = {job: self.summary(job) for job in self.order}
        if self.order:
            jobs[ALL_JOBS] = self.everything
        return {"jobs": jobs, **self.fields}

    def kept(self) -> Dict[str, KeptJob]:
        """Every job's part, its line made (for the cache): rows() takes
        the lines as they are."""
        self.made = self.lines(self.order)
        return self.jobs


def _cross_jobs(jobs: Dict[str, KeptJob], wanted: Optional[set], no_row: List[int]) -> tuple:
    """What crosses the jobs' parts: (the agents each job is joined by, the
    processes filtered out, the rows per torch release, the report's jobs
    sorted); _record_files.cross_jobs where built."""
    parents: Dict[tuple, str] = {}
    for job, kept in jobs.items():
        for key in kept[2]:
            known = parents.get(key)
            if known is None or job < known:
                parents[key] = job
    filtered = 0
    joined: Dict[str, int] = {}
    for job, kept in jobs.items():
        filtered += kept[4]
        for key in kept[3]:
            target = parents.get(key, job)
            if wanted is not None and target not in wanted:
                filtered += 1
            else:
                joined[target] = joined.get(target, 0) + 1
    releases: Dict[str, List[int]] = {}
    for kept in jobs.values():
        for release, row in kept[1].items():
            releases[release] = [a + b for a, b in zip(releases.get(release, no_row), row)]
    # The jobs of the report: those that counted a process or that an agent
    # joined.
    order = sorted(
        job
        for job in jobs.keys() | joined.keys()
        if joined.get(job) or (job in jobs and jobs[job][0] is not None)
    )
    return joined, filtered, releases, order


def _sum_lights(jobs: Dict[str, KeptJob], order: List[str], no_counts: tuple, no_passes: tuple):
    """The sums of the lights of the jobs `order` (a job that counted no
    process: `no_counts`; one that counted no pass: `no_passes`), each name
    where it first appears: (processes, ranks, processes_with, passes,
    processes counting passes, {torch}, left_out, {class: [vote]}), each
    class's votes in the jobs' order; _record_files.sum_lights where built."""
    lights = [no_counts if kept[0] is None else kept[5] for kept in (jobs[job] for job in order)]
    columns = list(zip(*lights))
    votes = [cost for costs in columns[7] if costs is not None for cost in costs]
    per_class = {
        device_class: [cost[1] for cost in votes if cost[0] == device_class]
        for device_class in dict.fromkeys(cost[0] for cost in votes)
    }
    return (
        sum(columns[0]),
        sum(columns[1]),
        _summed(columns[2], {}),
        _summed((p or no_passes for p in columns[3]), {}),
        sum(columns[4]),
        set(chain.from_iterable(columns[5])),
        _summed(columns[6], {}),
        per_class,
    )


def _summed(counts: Iterable[tuple], into: dict) -> dict:
    """`into` with the (name, n) pairs of each tuple of `counts` added in
    turn: each name where it first appears."""
    for pairs in counts:
        for name, n in pairs:
            into[name] = into.get(name, 0) + n
    return into


def assemble(results: Dict[str, JobResult], skipped: Counter, wanted: Optional[set]) -> dict:
    """The report of the jobs' parts made now (Assembled)."""
    return Assembled(
        {job: kept_job(job, r) for job, r in results.items()}, skipped, wanted
    ).report()


def _kept(name: Optional[str]) -> Optional[str]:
    """`name`, shared with every equal name kept: a fleet's hosts, start
    times and jobs repeat across its agents and ranks' parents, and each
    record decodes its own copy."""
    return name if name is None else sys.intern(name)


def _release_row() -> List[int]:
    """A torch release's [processes, with each event]."""
    return [0] * (1 + len(EVENTS))
