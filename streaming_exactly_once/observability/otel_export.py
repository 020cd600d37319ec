"""The store through OpenTelemetry, when the process has an OpenTelemetry SDK configured.

Which ``MeterProvider``: the global one if the application set an SDK provider (its readers
and exporters are the user's), else - when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` is set - one of our own that exports over OTLP/HTTP
(the SDK reads the endpoint, headers and interval from the standard variables), else none.
Counters and gauges are observable instruments reading the store's snapshot when the SDK
collects; histograms are synchronous ones, fed the observations the store queued for them by the
first callback of each collection (so the batch's thread never calls into the SDK).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from .catalog import METRICS, Metric
from .store import STORE, MetricStore, Sample

log = logging.getLogger("streaming_exactly_once.observability")

MAX_QUEUED = 100_000
OTLP_ENV = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_lock = threading.Lock()
_exports: dict[int, OtelExport] = {}  # id(provider) -> its export
_own: list[Any] = []  # the provider made for OTLP_ENV, once


def configured_provider() -> Any:
    """The SDK ``MeterProvider`` to export through (module docstring), or None."""
    try:
        from opentelemetry import metrics as otel_metrics
        from opentelemetry.sdk.metrics import MeterProvider
    except ImportError:
        return None
    provider = otel_metrics.get_meter_provider()
    if isinstance(provider, MeterProvider):
        return provider
    if not any(os.environ.get(name) for name in OTLP_ENV):
        return None
    with _lock:
        if not _own:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            _own.append(MeterProvider(metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]))
        return _own[0]


class OtelExport:
    """Every declared metric as an instrument of ``provider``'s meter, reading ``store``."""

    def __init__(self, provider: Any, store: MetricStore = STORE) -> None:
        from opentelemetry.metrics import Observation

        self.provider = provider
        self.store = store
        self._observation = Observation
        meter = provider.get_meter("streaming_exactly_once")
        self.histograms: dict[str, Any] = {}
        for m in METRICS:
            if m.kind == "histogram":
                self.histograms[m.name] = meter.create_histogram(
                    m.name, unit=m.unit, description=m.help, explicit_bucket_boundaries_advisory=list(m.buckets)
                )
            elif m.kind == "counter":
                meter.create_observable_counter(m.name, callbacks=[self._callback(m)], unit=m.unit, description=m.help)
            else:
                meter.create_observable_gauge(m.name, callbacks=[self._callback(m)], unit=m.unit, description=m.help)
        #: bounded: without collections (no reader) the oldest observations go
        self.queue: deque[Sample] = deque(maxlen=MAX_QUEUED)
        store.observation_queues.append(self.queue)

    def _callback(self, m: Metric) -> Callable[[Any], Iterable[Any]]:
        def observe(options: Any) -> Iterable[Any]:
            self.drain()  # before the SDK reads the histograms of this collection
            snap = self.store.snapshot(max_age=1.0)  # one snapshot serves every instrument of a collection
            return [self._observation(value, dict(zip(m.labels, labels, strict=True))) for labels, value in snap.values[m.name].items()]

        return observe

    def drain(self) -> None:
        """Record the queued observations into the SDK's histograms."""
        queue = self.queue
        while queue:
            try:
                m, labels, value = queue.popleft()
            except IndexError:
                return
            self.histograms[m.name].record(value, attributes=dict(zip(m.labels, labels, strict=True)))

    def close(self) -> None:
        if self.queue in self.store.observation_queues:
            self.store.observation_queues.remove(self.queue)


def export_through_otel(store: MetricStore = STORE) -> OtelExport | None:
    """Export ``store`` through the configured OpenTelemetry SDK (once per provider); None when
    none is configured."""
    provider = configured_provider()
    if provider is None:
        return None
    with _lock:
        held = _exports.get(id(provider))
        if held is None:
            held = _exports[id(provider)] = OtelExport(provider, store)
            log.info("metrics are exported through the OpenTelemetry SDK's MeterProvider %s", type(provider).__name__)
        return held


def stop_exporting() -> None:
    """Stop every export, and shut the provider made for ``OTLP_ENV`` down (tests)."""
    with _lock:
        held = list(_exports.values())
        _exports.clear()
        own = _own[:]
        _own.clear()
    for export in held:
        export.close()
    for provider in own:
        provider.shutdown()
