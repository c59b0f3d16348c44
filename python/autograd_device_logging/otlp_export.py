"""The process's counts, pushed over OTLP/HTTP (protobuf) with
AUTOGRAD_DEVICE_LOGGING_OTLP=1: the families of the Prometheus textfile
(metric_families.py), from the same record the library writes.

Note [Pushing the counts over OTLP]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The OpenTelemetry SDK and its OTLP/HTTP exporter are an optional extra
(`pip install autograd_device_logging[otlp]`); without them the switch costs
one line that says what to install. The exporter finds the endpoint in the
standard variables (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, else
OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/metrics, else localhost:4318), and the
resource takes OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME as the SDK
does. The library adds service.name (the program, unless those name one),
host.name, process.pid, the job (autograd_device_logging.job; k8s.job.name
where $KUBERNETES_JOB_NAME is set; autograd_device_logging.slurm.job_id
where Slurm runs the process, since no convention names it) and the rank as
a metric attribute.

What: the snapshot each write encoded for its followers (Note [Every output
is a sink of one writer], output_sinks.h), the one the record and the
textfile were written from; no snapshot of its own. When: after each write
(the library's writer thread serves its write points, the first pass, an
event, a measured pair, even with no directory set, and one thread of this
package waits on it in C, without the GIL), and once at exit, after a write
for the followers alone. Each export is bounded by EXPORT_BOUND_S: at exit the
interpreter waits that long at most, then goes on without it. A failed
export (an unreachable endpoint, a refusal) is one warning per process,
which names the cause (failure_cause): the connection refused, the host name
not resolved, the HTTP status the endpoint answered, or no answer within the
bound. The exporter reports its failures only in its own log lines; from
this package's threads they are kept for that cause and dropped, so that
nothing else is printed. Nothing here runs on a thread that runs backward.
"""

from __future__ import annotations

import atexit
import ctypes
import http
import json
import logging
import os
import socket
import threading
from typing import Iterable, List, Optional

from . import _user_warning
from .metric_families import FAMILIES, process_samples
from .settings import OTLP as ENV

#: The most one export takes, and the most it delays exit.
EXPORT_BOUND_S = 2.0
#: The exporting threads' names (their log lines are dropped).
THREAD_PREFIX = "adl_otlp"
INSTALL = "pip install 'autograd_device_logging[otlp]'"


class _FromOurThreads(logging.Filter):
    """Drops the exporter's log lines on this package's threads, and keeps
    them for the export that is running there (`_ExportLog`)."""

    def filter(self, record):
        if not record.threadName.startswith(THREAD_PREFIX):
            return True
        kept = getattr(_export_log, "records", None)
        if kept is not None:
            kept.append(record)
        return False


# The log records of the export running on this thread.
_export_log = threading.local()

_STATUS_BY_PHRASE = {status.phrase: status for status in http.HTTPStatus}


def _exceptions_in(value) -> Iterable[BaseException]:
    """`value` and every exception it wraps: chained, in urllib3's reason,
    or among its arguments."""
    seen, pending = set(), [value]
    while pending:
        e = pending.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        pending += [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args]


def failure_cause(records: List[logging.LogRecord], raised: Optional[BaseException]) -> str:
    """Why an export failed, in words, from the exporter's log records of
    that export and what it raised, if anything."""
    errors, statuses = [], []
    for value in [raised] + [a for r in records for a in (r.args or ())]:
        errors += list(_exceptions_in(value))
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            try:
                statuses.append(http.HTTPStatus(value))
            except ValueError:
                statuses.append(value)
        elif isinstance(value, str) and value in _STATUS_BY_PHRASE:
            statuses.append(_STATUS_BY_PHRASE[value])
    for e in errors:
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
    for e in errors:
        if isinstance(e, socket.gaierror) or type(e).__name__ == "NameResolutionError":
            return "host name not resolved"
    if statuses:
        status = statuses[-1]
        if isinstance(status, http.HTTPStatus):
            return f"HTTP status {status.value} {status.phrase}"
        return f"HTTP status {status}"
    for e in errors:
        if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
            return f"no answer within {EXPORT_BOUND_S:g} s"
    if errors:
        return f"{type(errors[0]).__name__}: {errors[0]}"
    if any("timeout" in r.getMessage() for r in records):
        return f"no answer within {EXPORT_BOUND_S:g} s"
    return "the endpoint did not take them"


def record(lib, write_now: bool) -> Optional[dict]:
    """The snapshot the library's writer encoded for its followers, the same
    one its files were written from (Note [Every output is a sink of one
    writer], output_sinks.h); with `write_now`, a write for them alone first.
    None when there is none."""
    size = lib.autograd_device_logging_followed_record_json(None, 0, int(write_now))
    if size == 0:
        return None
    for _ in range(3):
        buffer = ctypes.create_string_buffer(size + 1)
        needed = lib.autograd_device_logging_followed_record_json(buffer, size + 1, 0)
        if needed <= size:
            return json.loads(buffer.value.decode("utf-8", "replace"))
        size = needed
    return None


def resource_attributes(first: dict, package_settings) -> dict:
    """The attributes the library adds to the SDK's resource (the Note):
    who the process is from its record, the scheduler's ids from the
    package's settings (settings.py)."""
    attributes = {
        "host.name": first["host"],
        "process.pid": first["pid"],
        "autograd_device_logging.job": first["job"],
    }
    if not package_settings.otel_service_named:
        attributes["service.name"] = os.path.basename(first["program"]) or first["program"]
    if package_settings.kubernetes_job_name:
        attributes["k8s.job.name"] = package_settings.kubernetes_job_name
    if package_settings.slurm_job_id:
        attributes["autograd_device_logging.slurm.job_id"] = package_settings.slurm_job_id
    return attributes


class Exporter:
    """One process's OTLP export (the Note)."""

    def __init__(self, lib, sdk, package_settings):
        self._lib = lib
        self._endpoint = package_settings.otlp_endpoint
        self._sdk = sdk
        self._lock = threading.Lock()
        self._warned = False
        self._samples = []
        first = record(lib, write_now=True) or {
            "job": "",
            "program": "",
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        self._reader = sdk.InMemoryMetricReader()
        provider = sdk.MeterProvider(
            resource=sdk.Resource.create(resource_attributes(first, package_settings)),
            metric_readers=[self._reader],
        )
        meter = provider.get_meter("autograd_device_logging")
        for family in FAMILIES:
            make = (
                meter.create_observable_counter
                if family.type == "counter"
                else meter.create_observable_gauge
            )
            make(
                family.otlp_name,
                callbacks=[self._observer(family)],
                unit=family.unit,
                description=family.help,
            )
        self._exporter = sdk.OTLPMetricExporter(timeout=EXPORT_BOUND_S)

    def _observer(self, family):
        def observe(options):
            return [
                self._sdk.Observation(s.value, s.labels)
                for s in self._samples
                if s.family is family
            ]

        return observe

    def export(self, write_now: bool = False) -> bool:
        """Exports the counts of the last write (of a write for the followers
        first, with `write_now`); False (after one warning per process) when
        the endpoint does not take them."""
        with self._lock:
            current = record(self._lib, write_now)
            if current is None:
                return False
            self._samples = process_samples(current, with_job=False)
            data = self._reader.get_metrics_data()
            _export_log.records = records = []
            raised = None
            try:
                result = self._exporter.export(data, timeout_millis=EXPORT_BOUND_S * 1000)
                ok = result == self._sdk.SUCCESS
            except Exception as e:  # the exporter's transport, whatever it raises
                ok, raised = False, e
            finally:
                _export_log.records = None
            if not ok and not self._warned:
                cause = failure_cause(records, raised)
                self._warned = True
                _user_warning.warn(
                    f"could not push this process's counts over OTLP to {self._endpoint} ({cause}); "
                    "the record and the Prometheus textfile are not affected"
                )
            return ok

    def follow(self) -> None:
        """Exports after each write of the record, for the life of the
        process (a daemon thread)."""
        seen = 0
        while True:
            served = self._lib.autograd_device_logging_wait_for_record_write(seen, 60_000)
            if served != seen:
                seen = served
                self.export()

    def at_exit(self) -> None:
        """The last export, bounded by EXPORT_BOUND_S."""
        thread = threading.Thread(
            target=self.export, args=(True,), name=THREAD_PREFIX + "_exit", daemon=True
        )
        thread.start()
        thread.join(EXPORT_BOUND_S)


class _Sdk:
    """The parts of the OpenTelemetry SDK this module uses, imported at once
    (ImportError where the extra is not installed)."""

    def __init__(self):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.metrics import Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
        from opentelemetry.sdk.resources import Resource

        self.OTLPMetricExporter = OTLPMetricExporter
        self.Observation = Observation
        self.MeterProvider = MeterProvider
        self.InMemoryMetricReader = InMemoryMetricReader
        self.Resource = Resource
        self.SUCCESS = MetricExportResult.SUCCESS


def start(lib, package_settings) -> Optional[Exporter]:
    """Starts the export for this process (the Note); None, after one
    warning, when the SDK is not installed."""
    try:
        sdk = _Sdk()
    except ImportError as e:
        _user_warning.warn(
            f"{ENV}=1 needs the OpenTelemetry SDK and its OTLP exporter ({e}): {INSTALL}"
        )
        return None
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("opentelemetry"):
            logging.getLogger(name).addFilter(_FromOurThreads())
    exporter = Exporter(lib, sdk, package_settings)
    # Has the write points served from now on, before any pass can reach one.
    lib.autograd_device_logging_wait_for_record_write(0, 0)
    threading.Thread(target=exporter.follow, name=THREAD_PREFIX, daemon=True).start()
    atexit.register(exporter.at_exit)
    return exporter
