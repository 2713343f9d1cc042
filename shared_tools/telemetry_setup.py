"""Where the spans go for the command line and the page: `setup_tracing("console" | "otlp" | None)`.

The SDK and the OTLP/HTTP exporter are core dependencies; with nothing listening at the OTLP endpoint,
`TracingUnavailable` says in one line what to do. What the standard variables say is left to the
SDK: OTEL_EXPORTER_OTLP_ENDPOINT and its friends, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*,
OTEL_SDK_DISABLED. Spans are flushed at interpreter exit (Ctrl-C included) and when a multiprocessing worker ends.
"""

from __future__ import annotations

import socket
import sys
from multiprocessing import util as multiprocessing_util
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider

ExportKind = Literal["console", "otlp"]
EXPORT_KINDS: tuple[ExportKind, ...] = ("console", "otlp")
SERVICE_NAME = "agent-loop-compare"
"""The service name when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES gives one."""
RECEIVER_CHECK_TIMEOUT_S = 2.0
OTEL_HELP = (
    "send OpenTelemetry GenAI spans of every run to stderr (console) or over OTLP/HTTP to "
    "$OTEL_EXPORTER_OTLP_ENDPOINT (otlp; default http://localhost:4318)"
)
"""The help of every face's ``--otel`` option."""


class TracingUnavailable(RuntimeError):
    """`--otel otlp` was asked for, but nothing accepts OTLP/HTTP at the endpoint."""


def setup_tracing(kind: ExportKind | None) -> TracerProvider | None:
    """Make an SDK provider exporting to `kind` the global one, and return it; None sets up nothing.

    ``console`` writes each span as one line of JSON to stderr (JSON Lines; stdout stays the program's output);
    ``otlp`` sends them over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318). Both batch
    the spans.
    """
    if kind is None:
        return None
    if kind not in EXPORT_KINDS:
        raise ValueError(f"unknown span exporter {kind!r}; choose one of {', '.join(EXPORT_KINDS)}")
    # Imported here: the SDK costs a fraction of a second that a run without --otel need not pay.
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporter: SpanExporter
    if kind == "console":
        # JSON Lines: one span a line, each written by one system call, so the lines of parallel workers sharing
        # stderr do not cut into each other (the SDK's default is an indented JSON over many lines).
        exporter = ConsoleSpanExporter(out=_WholeLines(), formatter=lambda span: span.to_json(indent=None) + "\n")
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        from shared_tools.telemetry_export import OneLineExporter

        otlp = OTLPSpanExporter()  # endpoint, headers, timeout, compression: from the OTEL_* variables
        # The endpoint as the exporter resolved it from the variables (it has no public accessor).
        endpoint = str(getattr(otlp, "_endpoint", ""))
        _check_receiver(endpoint)
        exporter = OneLineExporter(otlp, endpoint)  # a receiver that fails later: one line, and no wait on it again
    resource = Resource.create()  # what OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say, and the SDK's own
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    # Shuts down (flushing every span) at interpreter exit.
    provider = TracerProvider(resource=resource, span_limits=_span_limits())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _flush_when_a_worker_ends(provider)
    multiprocessing_util.register_after_fork(provider, _flush_when_a_worker_ends)
    return provider


class _WholeLines:
    """The stream `--otel console` writes to: stderr's file descriptor, each text written by one ``os.write``
    (stderr's buffer is flushed first, so the lines stay in order with what the program said before); a
    stderr with no file (a test's capture) is written to as it is."""

    def write(self, text: str) -> int:
        import os

        sys.stderr.flush()
        try:
            fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):  # replaced by a stream with no file (a test's capture)
            return sys.stderr.write(text)
        data = text.encode("utf-8", "backslashreplace")
        while data:
            data = data[os.write(fd, data) :]
        return len(text)

    def flush(self) -> None:
        return None


def _span_limits() -> SpanLimits:
    """The SDK's limits, as the OTEL_* variables say; unless one sets the length of an attribute's value, it is cut
    at `telemetry.MAX_ATTRIBUTE_CHARS`: ours are cut there already, this cuts what other code puts on spans (a
    framework's own), which the SDK leaves unbounded by default."""
    import os

    from opentelemetry.sdk.trace import SpanLimits

    from shared_tools.telemetry import MAX_ATTRIBUTE_CHARS

    variables = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    if any(os.environ.get(name, "").strip() for name in variables):
        return SpanLimits()
    return SpanLimits(max_span_attribute_length=MAX_ATTRIBUTE_CHARS)


def _check_receiver(endpoint: str) -> None:
    """Raise `TracingUnavailable` (one line, how to start one) unless something accepts connections at `endpoint`:
    otherwise every batch would fail, and the exit would wait out the exporter's retries (about 8 s)."""
    parts = urlsplit(endpoint)
    if not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=RECEIVER_CHECK_TIMEOUT_S).close()
    except OSError:
        raise TracingUnavailable(
            f"nothing accepts OTLP/HTTP at {endpoint} (from OTEL_EXPORTER_OTLP_ENDPOINT or its default): start a "
            "receiver there, e.g. Arize Phoenix (PHOENIX_HOST=127.0.0.1 phoenix serve, then "
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:6006), or use --otel console"
        ) from None


def _flush_when_a_worker_ends(provider: TracerProvider) -> None:
    """A process forked by multiprocessing ends with ``os._exit``, which runs no atexit handler, but it runs these
    finalizers first: without one, the spans of runs done in a forked worker would be lost. (A spawned one, such
    as uvicorn's ``serve --workers`` processes, sets up its own in `webdemo.server.app_from_env`.)"""
    multiprocessing_util.Finalize(provider, provider.force_flush, exitpriority=0)


def flush_tracing() -> None:
    """Send every span still buffered now (the faces call it before they print their last line)."""
    if "opentelemetry.sdk.trace" not in sys.modules:
        return  # no SDK provider was set up, so nothing is buffered (and the SDK's import is not paid for)
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush()
