# Owner(s): ["module: autograd"]
"""The OTLP export (Note [Pushing the counts over OTLP], otlp_export.py):
an OTLP/HTTP receiver on loopback, which decodes what it receives with
opentelemetry-proto, gets the record's counts with the documented resource
attributes; an unreachable endpoint is one warning and delays exit by at most
the bound; without the SDK, one line says what to install."""

import http.server
import os
import tempfile
import threading
import time

from common_device_logging import (
    ACCELERATOR_LIBRARY,
    DEVICE_THREADS_IDLE,
    LIBRARY,
    WITH_TEST_ACCELERATOR,
    child_env,
    only_record,
    require_built,
    run_python,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from torch.testing._internal.common_utils import TestCase, run_tests

# Every class but multi-accelerator, then both events; the process then
# waits a little so that the first-pass and event exports arrive before exit.
PASSES = """
a = torch.ones(4, requires_grad=True)
for _ in range(3):
    (a * 2).sum().backward()
b = a.detach().to(d0).requires_grad_()
(b * 2).sum().backward()
((a.to(d0)).sum() + (a * 3).sum().to(d0)).backward()
((a.to(d0)).sum() + a.to(d1).sum().to(d0)).backward()
"""
EXPORT_BOUND_S = 2.0


def serve_on_loopback(handler):
    """A threading HTTP server of `handler` on a free loopback port, serving
    from a daemon thread."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Receiver:
    """An OTLP/HTTP metrics receiver on loopback."""

    def __init__(self):
        self.requests = []
        received = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                received.append((self.path, self.headers.get("Content-Type"), request))
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = serve_on_loopback(Handler)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Refusing(Receiver):
    """An HTTP endpoint on loopback that answers every request with
    `status`, or, with status None, accepts connections and never answers."""

    def __init__(self, status):
        self.status = status
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                if outer.status is None:
                    outer.closed.wait(30)
                    return
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.closed = threading.Event()
        self.server = serve_on_loopback(Handler)

    def close(self):
        self.closed.set()
        super().close()


def attributes(key_values):
    out = {}
    for kv in key_values:
        value = kv.value
        out[kv.key] = value.string_value if value.HasField("string_value") else value.int_value
    return out


def points(request):
    """{metric name: {frozenset(attributes): value}} of one request."""
    out = {}
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                data = metric.sum if metric.HasField("sum") else metric.gauge
                for p in data.data_points:
                    value = p.as_int if p.HasField("as_int") else p.as_double
                    out.setdefault(metric.name, {})[
                        frozenset(attributes(p.attributes).items())
                    ] = value
    return out


class TestOtlpExport(TestCase):
    def setUp(self):
        super().setUp()
        require_built(self, LIBRARY, ACCELERATOR_LIBRARY)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.records = os.path.join(self.tmp.name, "records")

    def run_child(self, code, **env):
        start = time.monotonic()
        proc = run_python(
            ["-c", code + DEVICE_THREADS_IDLE],
            child_env(self.records, **{"AUTOGRAD_DEVICE_LOGGING_OTLP": "1", **env}),
        )
        proc.took = time.monotonic() - start
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc

    def warnings_of(self, stderr):
        return [line for line in stderr.splitlines() if "autograd_device_logging" in line]

    def test_the_receiver_gets_the_records_counts(self):
        receiver = Receiver()
        self.addCleanup(receiver.close)
        proc = self.run_child(
            WITH_TEST_ACCELERATOR + PASSES + "import time\ntime.sleep(1)\n",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            AUTOGRAD_DEVICE_LOGGING_STATS="1",
            AUTOGRAD_DEVICE_LOGGING_JOB="train-7",
            RANK="2",
            SLURM_JOB_ID="991",
            KUBERNETES_JOB_NAME="train-7-k8s",
        )
        self.assertEqual(self.warnings_of(proc.stderr), [])
        record = only_record(self, self.records)
        # The first pass, the event and exit each pushed.
        self.assertGreaterEqual(len(receiver.requests), 2, receiver.requests)
        for path, content_type, _ in receiver.requests:
            self.assertEqual((path, content_type), ("/v1/metrics", "application/x-protobuf"))
        last = receiver.requests[-1][2]
        (resource_metrics,) = last.resource_metrics
        resource = attributes(resource_metrics.resource.attributes)
        self.assertEqual(resource["autograd_device_logging.job"], "train-7")
        self.assertEqual(resource["k8s.job.name"], "train-7-k8s")
        self.assertEqual(resource["autograd_device_logging.slurm.job_id"], "991")
        self.assertEqual(resource["process.pid"], record["pid"])
        self.assertEqual(resource["host.name"], record["host"])
        self.assertEqual(resource["service.name"], "-c")
        got = points(last)
        passes = got["autograd_device_logging_backward_passes"]
        self.assertEqual({dict(k)["class"]: v for k, v in passes.items()}, record["pass_classes"])
        self.assertTrue(all(dict(k)["rank"] == "2" for k in passes))
        events = got["autograd_device_logging_events"]
        self.assertEqual(
            {dict(k)["event"] for k, v in events.items() if v == 1}, set(record["events"])
        )
        self.assertEqual(len(record["events"]), 2)
        (info,) = got["autograd_device_logging_info"]
        self.assertEqual(dict(info)["torch"], record["torch"]["running"])
        # Counters are monotonic sums.
        metric = next(
            m
            for m in last.resource_metrics[0].scope_metrics[0].metrics
            if m.name == "autograd_device_logging_backward_passes"
        )
        self.assertTrue(metric.sum.is_monotonic)

    def test_the_standard_service_name_wins(self):
        receiver = Receiver()
        self.addCleanup(receiver.close)
        self.run_child(
            WITH_TEST_ACCELERATOR + PASSES,
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=receiver.endpoint + "/v1/metrics",
            OTEL_SERVICE_NAME="trainer",
        )
        resource = attributes(receiver.requests[-1][2].resource_metrics[0].resource.attributes)
        self.assertEqual(resource["service.name"], "trainer")

    def test_an_unreachable_endpoint_is_one_warning_within_the_bound(self):
        # Time for the exports after the first pass and the events to fail
        # too: each failure after the first is silent.
        code = WITH_TEST_ACCELERATOR + PASSES + "import time\ntime.sleep(1)\n"
        with_otlp = self.run_child(
            code, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"  # discard: nothing listens
        )
        (warning,) = self.warnings_of(with_otlp.stderr)
        self.assertIn(
            "could not push this process's counts over OTLP to http://127.0.0.1:9 "
            "(connection refused)",
            warning,
        )
        self.assertEqual(with_otlp.stderr.strip().count("\n"), 0, with_otlp.stderr)
        without = self.run_child(code, AUTOGRAD_DEVICE_LOGGING_OTLP="0")
        # The exit export's bound, and 2 s of noise on a loaded machine.
        self.assertLess(with_otlp.took, without.took + EXPORT_BOUND_S + 2.0)

    def test_the_warning_names_the_cause(self):
        # One fresh process per endpoint; each warns once, naming the cause.
        cases = [("http://autograd-device-logging-test.invalid:4318", "host name not resolved")]
        for status, cause in (
            (404, "HTTP status 404 Not Found"),  # not retried
            (503, "HTTP status 503 Service Unavailable"),  # retried to the bound
            (None, f"no answer within {EXPORT_BOUND_S:g} s"),
        ):
            endpoint = Refusing(status)
            self.addCleanup(endpoint.close)
            cases.append((endpoint.endpoint, cause))
        for endpoint, cause in cases:
            proc = self.run_child(
                WITH_TEST_ACCELERATOR + PASSES, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint
            )
            (warning,) = self.warnings_of(proc.stderr)
            self.assertIn(f"over OTLP to {endpoint} ({cause});", warning)

    def test_without_the_sdk_one_line_says_what_to_install(self):
        hidden = os.path.join(self.tmp.name, "hidden")
        os.makedirs(os.path.join(hidden, "opentelemetry"))
        with open(os.path.join(hidden, "opentelemetry", "__init__.py"), "w") as f:
            f.write("raise ImportError('No module named opentelemetry')\n")
        proc = self.run_child(
            WITH_TEST_ACCELERATOR + PASSES,
            PYTHONPATH=hidden + os.pathsep + child_env("")["PYTHONPATH"],
        )
        (warning,) = self.warnings_of(proc.stderr)
        self.assertIn("pip install 'autograd_device_logging[otlp]'", warning)
        self.assertEqual(only_record(self, self.records)["written_at"], "exit")


if __name__ == "__main__":
    run_tests()
