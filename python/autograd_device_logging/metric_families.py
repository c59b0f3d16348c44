"""The telemetry's metric families, spelled once for Python, and the one map
from what the library records to their samples: a process's record (for the
OTLP export, otlp_export.py) or a fleet report's per-job summary (for
`report DIR --prometheus FILE`). torch/csrc/autograd/prometheus_text.cpp
spells the same families for the per-process textfile (Note [The Prometheus
textfile]); test/test_prometheus.py holds the two together.

Labels are bounded (no pid, path or time): the training job (JOB_LABEL),
the rank where RANK is set, the device class, the event, and in the _info
family the releases and the library's on/off words.

The job's label is not `job`: Prometheus gives every scraped series the
scrape's own `job` and `instance`, and under its default honor_labels: false
renames a target's `job` to `exported_job`, so that `sum by (job)` would
group by the exporter. A fleet report's families carry _fleet_ in their
names (FLEET_FAMILIES), so that its file can sit beside the per-process ones
in one textfile directory without a series of the same name and labels (which
node_exporter drops) and without counting a job twice in one sum."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Dict, Iterable, List

from . import vocabulary


@dataclasses.dataclass(frozen=True)
class Family:
    #: Its name in the Prometheus text format (counters end in _total).
    name: str
    #: "counter" or "gauge".
    type: str
    help: str
    #: Its unit, as OTLP names it (UCUM).
    unit: str = "1"

    @property
    def otlp_name(self) -> str:
        """Its name in OTLP, where a counter's _total is the exporter's."""
        return self.name[: -len("_total")] if self.name.endswith("_total") else self.name


INFO = Family(
    "autograd_device_logging_info",
    "gauge",
    "The torch release and the library's state (value 1).",
)
LAST_UPDATE = Family(
    "autograd_device_logging_last_update_timestamp_seconds",
    "gauge",
    "When the process last wrote this file (Unix time, whole seconds).",
    "s",
)
PASSES = Family(
    "autograd_device_logging_backward_passes_total",
    "counter",
    "Backward passes, by the devices their graph spans (AUTOGRAD_DEVICE_LOGGING_STATS=1).",
    "{pass}",
)
EVENTS = Family(
    "autograd_device_logging_events_total",
    "counter",
    "Processes that raised each once-per-process API-usage event.",
    "{process}",
)
PAIRS = Family(
    "autograd_device_logging_threading_cost_pairs_total",
    "counter",
    "Pairs of passes the threading-cost measurement timed, by device class.",
    "{pair}",
)
MULTITHREADED_SECONDS = Family(
    "autograd_device_logging_threading_cost_multithreaded_seconds_total",
    "counter",
    "Time of the measured passes run multithreaded, by device class.",
    "s",
)
SINGLE_THREADED_SECONDS = Family(
    "autograd_device_logging_threading_cost_single_threaded_seconds_total",
    "counter",
    "Time of the measured passes run on the calling thread, by device class.",
    "s",
)
#: In the order the text gives them.
FAMILIES = (
    INFO,
    LAST_UPDATE,
    PASSES,
    EVENTS,
    PAIRS,
    MULTITHREADED_SECONDS,
    SINGLE_THREADED_SECONDS,
)
#: The label that names the training job.
JOB_LABEL = "training_job"
_PREFIX = "autograd_device_logging_"


def _fleet(family: Family) -> Family:
    return dataclasses.replace(
        family,
        name=family.name.replace(_PREFIX, _PREFIX + "fleet_", 1),
        help=family.help + " Per job, over a fleet report's records.",
    )


#: The families of a fleet report's --prometheus, by the process family.
FLEET = {family: _fleet(family) for family in (INFO, PASSES, EVENTS, PAIRS)}
FLEET_FAMILIES = tuple(FLEET.values())


@dataclasses.dataclass(frozen=True)
class Sample:
    family: Family
    labels: Dict[str, str]
    value: float


def _on_off(on: bool) -> str:
    return "on" if on else "off"


def _unix_seconds(utc: str) -> int:
    """The record's "time" (YYYY-MM-DDTHH:MM:SSZ) as Unix time."""
    return int(
        datetime.datetime.strptime(utc, "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=datetime.timezone.utc)
        .timestamp()
    )


def _rank_labels(record: dict) -> Dict[str, str]:
    rank = record.get("rank")
    return {} if rank is None else {"rank": str(rank)}


def process_samples(record: dict, with_job: bool = True) -> List[Sample]:
    """The samples of one process's record (schema/process_record.schema.json),
    as its textfile holds them. Without `with_job` the job is left to the
    caller (OTLP puts it on the resource)."""
    own = ({JOB_LABEL: record["job"]} if with_job else {}) | _rank_labels(record)
    cost = record.get("threading_cost")
    state = (
        "disabled"
        if record.get("disabled_reason")
        else (
            "exited"
            if record.get("written_at") == "exit"
            else "active" if record.get("ran_backward") else "idle"
        )
    )
    samples = [
        Sample(
            INFO,
            own
            | {
                "torch": record["torch"]["running"],
                "torch_built_for": record["torch"]["built_for"],
                "library_version": record["library_version"],
                "events_logged_by": record["events_logged_by"],
                "state": state,
                "statistics": _on_off(record.get("pass_classes") is not None),
                "threading_cost": _on_off(cost is not None),
                "calling_thread": _on_off(bool(record.get("calling_thread"))),
            },
            1,
        ),
        Sample(LAST_UPDATE, own, _unix_seconds(record["time"])),
    ]
    if record.get("pass_classes") is not None:
        samples += [
            Sample(PASSES, own | {"class": c}, record["pass_classes"].get(c, 0))
            for c in vocabulary.CLASSES
        ]
    raised = set(record.get("events", ()))
    samples += [Sample(EVENTS, own | {"event": e}, int(e in raised)) for e in vocabulary.EVENTS]
    if cost is not None:
        pairs = cost.get("pairs", {})
        for family, column in (
            (PAIRS, None),
            (MULTITHREADED_SECONDS, 1),
            (SINGLE_THREADED_SECONDS, 0),
        ):
            for c in vocabulary.CLASSES:
                rows = pairs.get(c, [])
                value = len(rows) if column is None else sum(row[column] for row in rows) / 1e9
                samples.append(Sample(family, own | {"class": c}, value))
    return samples


def fleet_samples(report: dict, all_jobs: str) -> List[Sample]:
    """The samples of a fleet report's --json (schema/fleet_report.schema.json),
    per job (`all_jobs`, the report's total row, is left out: PromQL sums), in
    the _fleet_ families. The fleet holds no per-pass durations, so the two
    seconds families are the textfile's alone."""
    short = _record_fields().EVENTS  # the report's short name of each event
    samples: List[Sample] = []
    for job, summary in report["jobs"].items():
        if job == all_jobs:
            continue
        own = {JOB_LABEL: job}
        samples += [Sample(FLEET[INFO], own | {"torch": t}, 1) for t in summary["torch"]]
        passes = summary.get("passes_per_class")
        if passes is not None:
            samples += [Sample(FLEET[PASSES], own | {"class": c}, n) for c, n in passes.items()]
        with_event = summary["processes_with"]
        samples += [
            Sample(FLEET[EVENTS], own | {"event": e}, with_event.get(short.get(e, e), 0))
            for e in _known_then_other(vocabulary.EVENTS, with_event, set(short.values()))
        ]
        for c, cost in (summary.get("threading_cost") or {}).items():
            samples.append(Sample(FLEET[PAIRS], own | {"class": c}, cost["pairs"]))
    return samples


def _known_then_other(known: Iterable[str], counted: dict, short_names) -> List[str]:
    """The known events, then those only a newer library names."""
    return list(known) + [name for name in counted if name not in short_names]


def _record_fields():
    from . import record_fields

    return record_fields


def by_family(samples: Iterable[Sample]) -> Dict[Family, List[Sample]]:
    out: Dict[Family, List[Sample]] = {family: [] for family in FAMILIES + FLEET_FAMILIES}
    for sample in samples:
        out[sample.family].append(sample)
    return out


def prometheus_collector(samples: List[Sample]):
    """A prometheus_client collector that serves `samples` (one HELP and TYPE
    per family, a family with no sample left out)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class _Collector:
        def collect(self):
            for family, rows in by_family(samples).items():
                if not rows:
                    continue
                kind = CounterMetricFamily if family.type == "counter" else GaugeMetricFamily
                names = sorted({label for row in rows for label in row.labels})
                metric = kind(family.name, family.help, labels=names)
                for row in rows:
                    metric.add_metric([row.labels.get(n, "") for n in names], row.value)
                yield metric

    return _Collector()


def write_prometheus_file(samples: List[Sample], path: str) -> None:
    """Writes `samples` to `path` in the text format, replacing it at once
    (prometheus_client's temporary and rename). Raises ImportError without
    prometheus_client."""
    from prometheus_client import CollectorRegistry, write_to_textfile

    registry = CollectorRegistry(auto_describe=False)
    registry.register(prometheus_collector(samples))
    write_to_textfile(path, registry)
