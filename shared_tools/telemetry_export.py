"""A span exporter that says in one line when its receiver fails, and stops waiting on it for a while.

`OneLineExporter` wraps the OTLP exporter `telemetry_setup` builds: a receiver that hangs, refuses or answers
with an error costs one export timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default), one warning of ours (the
exporter's own log lines are silenced), and then `QUIET_S` of batches dropped at once, so neither the exit's last
flush nor a long-running `serve` waits on it again and again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger(__name__)

QUIET_S = 30.0
"""After a failed export, batches are dropped without trying for this long; then the receiver is tried again."""
EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http",)
"""The loggers whose lines `OneLineExporter`'s one warning replaces (one per failed batch, some with a retry each)."""


class OneLineExporter(SpanExporter):
    """`inner`, which sends to `endpoint`, with its failures said once per outage and a rest after each."""

    def __init__(self, inner: SpanExporter, endpoint: str, *, quiet_s: float = QUIET_S) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.quiet_s = quiet_s
        self.dropped = 0
        """Spans not sent: in a failed export, or dropped while resting."""
        self._resting_until = 0.0
        self._down = False
        self._lock = threading.Lock()
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if time.monotonic() < self._resting_until:
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter bug must not end the batch thread: it is a failed batch like another
            log.debug("span export raised %s", type(exc).__name__)
            result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                if self._down:
                    log.warning("the OTLP receiver at %s takes spans again", self.endpoint)
                self._down = False
                return result
            self.dropped += len(spans)
            self._resting_until = time.monotonic() + self.quiet_s
            if not self._down:
                log.error(
                    "spans not sent: the OTLP receiver at %s did not take them (no answer in time, refused or an "
                    "error); spans are dropped for %.0f s at a time until it does",
                    self.endpoint,
                    self.quiet_s,
                )
            self._down = True
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)
