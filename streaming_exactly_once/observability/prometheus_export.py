"""The store in Prometheus' text format, on an HTTP port of the process (``metrics=9108``).

One collector turns a snapshot of the store into metric families, every one from its
declaration (``catalog``); it is registered in a registry of its own, not prometheus_client's
global one, so the process' other metrics are not mixed in unless the user adds the collector
there (``collector()``). A port is served once per process, whatever number of sinks ask for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError
from .catalog import METRICS
from .store import STORE, MetricStore

_lock = threading.Lock()
#: (host, requested port) -> (server, thread, bound port)
_servers: dict[tuple[str, int], tuple[Any, threading.Thread, int]] = {}
_registry: Any = None


class StoreCollector:
    """A prometheus_client collector of ``store``: ``collect`` yields every declared metric."""

    def __init__(self, store: MetricStore = STORE) -> None:
        self.store = store

    def describe(self) -> list[Any]:
        return []  # no collect at registration time

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        snap = self.store.snapshot()
        for m in METRICS:
            if m.kind == "histogram":
                hist = HistogramMetricFamily(m.name, m.help, labels=m.labels, unit="")
                for labels, h in snap.histograms[m.name].items():
                    buckets = [("+Inf" if bound == float("inf") else repr(bound), count) for bound, count in h.cumulative(m.buckets)]
                    hist.add_metric(list(labels), buckets, h.sum)
                yield hist
                continue
            family = (
                CounterMetricFamily(m.name, m.help, labels=m.labels) if m.kind == "counter" else GaugeMetricFamily(m.name, m.help, labels=m.labels)
            )
            for labels, value in snap.values[m.name].items():
                family.add_metric(list(labels), value)
            yield family


def collector() -> StoreCollector:
    """The collector of the process' store (to register in a registry of your own)."""
    return StoreCollector(STORE)


def registry() -> Any:
    """The prometheus_client registry the HTTP endpoints serve."""
    global _registry
    with _lock:
        if _registry is None:
            from prometheus_client import CollectorRegistry

            _registry = CollectorRegistry(auto_describe=False)
            _registry.register(collector())
        return _registry


def serve(host: str, port: int) -> str:
    """Serve the store at ``http://host:port/metrics`` (once per process and address); the URL."""
    served = registry()
    with _lock:
        held = _servers.get((host, port))
        if held is None:
            from prometheus_client import start_http_server

            try:
                server, thread = start_http_server(port, addr=host, registry=served)
            except OSError as exc:
                raise ConfigError(f"metrics cannot listen on {host}:{port}: {exc}. Choose another port.", key="metrics") from exc
            held = _servers[(host, port)] = (server, thread, server.server_address[1])
        bound = held[2]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://{shown}:{bound}/metrics"


def stop_serving() -> None:
    """Close every endpoint this process serves (tests; a process that exits needs nothing)."""
    with _lock:
        held = list(_servers.values())
        _servers.clear()
    for server, thread, _ in held:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
