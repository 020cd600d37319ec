"""The process's metric values: the one place batches record into and exporters read from.

A batch's figures go into plain dictionaries under one lock, taken once per batch (``apply``);
the Prometheus collector and the OpenTelemetry callbacks read a snapshot of them when they are
scraped or export. Values that only make sense at the moment they are read - the age of the last
commit, a source's lag - come from *providers* (each sink's ``SinkMetrics``), asked at that moment.
OpenTelemetry has no asynchronous histogram: each observation is also queued for every
OpenTelemetry export (``observation_queues``), which records it into its synchronous histograms
when the SDK collects - not on the batch's thread.
"""

from __future__ import annotations

import bisect
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .catalog import METRICS, Metric

Labels = tuple[str, ...]
#: one computed value: its metric, label values (in the metric's label order) and value
Sample = tuple[Metric, Labels, float]


class Provider(Protocol):
    """Something that computes metric values when they are read (``SinkMetrics``)."""

    def samples(self) -> Iterable[Sample]: ...


@dataclass
class Histogram:
    """One label set's histogram: per-bucket counts (not cumulative), sum and count."""

    counts: list[int]
    sum: float = 0.0
    count: int = 0

    def cumulative(self, buckets: tuple[float, ...]) -> list[tuple[float, int]]:
        """``(upper bound, observations <= it)`` per bucket, ``+Inf`` last."""
        out, running = [], 0
        for bound, n in zip((*buckets, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass
class Snapshot:
    """Every value at one instant: ``values`` for counters and gauges, ``histograms``."""

    taken: float
    values: dict[str, dict[Labels, float]] = field(default_factory=dict)
    histograms: dict[str, dict[Labels, Histogram]] = field(default_factory=dict)


class MetricStore:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = {m.name: {} for m in METRICS if m.kind != "histogram"}
        self._histograms: dict[str, dict[Labels, Histogram]] = {m.name: {} for m in METRICS if m.kind == "histogram"}
        self._providers: weakref.WeakSet[Provider] = weakref.WeakSet()
        #: one queue per OpenTelemetry export: every histogram observation, until it collects
        self.observation_queues: list[deque[Sample]] = []
        self._snapshot: Snapshot | None = None

    # -- recording (the batch's thread) -----------------------------------------------------------

    def inc(self, metric: Metric, labels: Labels, amount: float = 1.0) -> None:
        self.apply(incs=((metric, labels, amount),))

    def set(self, metric: Metric, labels: Labels, value: float) -> None:
        self.apply(sets=((metric, labels, value),))

    def observe(self, metric: Metric, labels: Labels, value: float) -> None:
        self.apply(observations=((metric, labels, value),))

    def apply(self, *, incs: Sequence[Sample] = (), sets: Sequence[Sample] = (), observations: Sequence[Sample] = ()) -> None:
        """A batch's updates, under the lock once."""
        with self._lock:
            values = self._values
            for metric, labels, amount in incs:
                series = values[metric.name]
                series[labels] = series.get(labels, 0.0) + amount
            for metric, labels, value in sets:
                values[metric.name][labels] = value
            for metric, labels, value in observations:
                hists = self._histograms[metric.name]
                hist = hists.get(labels)
                if hist is None:
                    hist = hists[labels] = Histogram([0] * (len(metric.buckets) + 1))
                hist.counts[bisect.bisect_left(metric.buckets, value)] += 1
                hist.sum += value
                hist.count += 1
            for queue in self.observation_queues:
                queue.extend(observations)

    def forget(self, keep: Callable[[Labels], bool], names: Iterable[str] | None = None) -> None:
        """Drop the label sets ``keep`` refuses (a query that is over: its series stop growing
        the process's memory and the scrape)."""
        with self._lock:
            for name, values in self._values.items():
                if names is None or name in names:
                    for labels in [labels for labels in values if not keep(labels)]:
                        del values[labels]
            for name, histograms in self._histograms.items():
                if names is None or name in names:
                    for labels in [labels for labels in histograms if not keep(labels)]:
                        del histograms[labels]

    # -- computed values --------------------------------------------------------------------------

    def add_provider(self, provider: Provider) -> None:
        self._providers.add(provider)

    def remove_provider(self, provider: Provider) -> None:
        self._providers.discard(provider)

    # -- reading (exporters) ----------------------------------------------------------------------

    def snapshot(self, *, max_age: float = 0.0) -> Snapshot:
        """Every value now (computed ones asked of their providers); a snapshot younger than
        ``max_age`` seconds is reused (OpenTelemetry asks once per instrument)."""
        held = self._snapshot
        now = time.monotonic()
        if held is not None and now - held.taken <= max_age:
            return held
        computed: list[Sample] = []
        for provider in list(self._providers):
            computed.extend(provider.samples())
        with self._lock:
            snap = Snapshot(
                now,
                {name: dict(series) for name, series in self._values.items()},
                {name: {k: Histogram(list(h.counts), h.sum, h.count) for k, h in series.items()} for name, series in self._histograms.items()},
            )
        for metric, labels, value in computed:
            snap.values[metric.name][labels] = value
        self._snapshot = snap
        return snap

    def series(self, name: str) -> Iterator[tuple[Labels, float]]:
        """The current values of counter or gauge ``name`` (recorded ones; tests and tools)."""
        with self._lock:
            items = list(self._values[name].items())
        yield from items


#: The process's one store: every sink of the process records into it, every exporter reads it.
STORE = MetricStore()
