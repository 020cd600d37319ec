"""The ``metrics`` and ``lineage`` sink options, parsed and checked once, when the sink is built.

Both are off by default, and then nothing of this package is imported by a batch. Turning one
on checks here, before anything is written, that its extra is installed (``extras.FEATURES``:
``metrics`` - prometheus-client and the OpenTelemetry SDK; ``lineage`` - openlineage-python).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import parse_duration_ms, parse_int
from ..errors import ConfigError
from ..extras import require

DEFAULT_NAMESPACE = "streaming_exactly_once"
LINEAGE_KEYS = ("transport", "namespace", "job", "throttle", "inputs", "kafka_namespace", "queue")


@dataclass(frozen=True)
class MetricsSettings:
    """Where Prometheus scrapes the process (``port`` None: no HTTP endpoint, OpenTelemetry only)."""

    host: str = "0.0.0.0"
    port: int | None = None

    @property
    def address(self) -> str | None:
        return None if self.port is None else f"{self.host}:{self.port}"


def metrics_settings(value: Any) -> MetricsSettings | None:
    """The ``metrics`` option: None or False (off), True (on, no HTTP endpoint), a port
    (``9108``; ``0``: any free one) or ``"host:port"``."""
    if value is None or value is False:
        return None
    if value is True:
        settings = MetricsSettings()
    elif isinstance(value, int) or (isinstance(value, str) and ":" not in value):
        settings = MetricsSettings(port=parse_int(value, key="metrics", minimum=0, maximum=65535))
    elif isinstance(value, str):
        host, _, port = value.rpartition(":")
        settings = MetricsSettings(host=host.strip("[]") or "0.0.0.0", port=parse_int(port, key="metrics", minimum=0, maximum=65535))
    else:
        raise ConfigError(
            f"metrics takes a port (9108), 'host:port', True (OpenTelemetry only) or None, not {value!r}",
            key="metrics",
        )
    require("metrics")
    return settings


@dataclass(frozen=True)
class LineageSettings:
    """How OpenLineage events are sent (the ``lineage`` option's keys, docs/observability.md)."""

    #: openlineage-python's transport config (``{"type": "http", "url": ...}``, ``file``, ``console``);
    #: None: the client's own configuration (``OPENLINEAGE_URL``, ``openlineage.yml``, ...)
    transport: Mapping[str, Any] | None = None
    namespace: str = DEFAULT_NAMESPACE
    #: the query's job name; None: the query's name, else the table's location
    job: str | None = None
    #: at most one batch event per this many milliseconds; the batches between are folded in
    throttle_ms: int = 0
    #: input datasets ``{"namespace": ..., "name": ...}`` instead of those found in the batch
    inputs: tuple[Mapping[str, str], ...] = ()
    #: the namespace of Kafka topics (OpenLineage names them ``kafka://host:port``)
    kafka_namespace: str = "kafka"
    #: events waiting for the sender thread; beyond it they are dropped and counted
    queue: int = 1000


def lineage_settings(value: Any) -> LineageSettings | None:
    """The ``lineage`` option: None or False (off), True (the client's own configuration) or a
    mapping of ``LINEAGE_KEYS``."""
    if value is None or value is False:
        return None
    require("lineage")
    if value is True:
        return LineageSettings()
    if not isinstance(value, Mapping):
        raise ConfigError(f"lineage takes True or a mapping of {', '.join(LINEAGE_KEYS)}, not {value!r}", key="lineage")
    unknown = sorted(set(value) - set(LINEAGE_KEYS))
    if unknown:
        raise ConfigError(f"lineage has no key {unknown[0]!r}; its keys are {', '.join(LINEAGE_KEYS)}", key="lineage")
    transport = value.get("transport")
    if transport is not None and (not isinstance(transport, Mapping) or "type" not in transport):
        raise ConfigError(
            "lineage.transport is openlineage-python's transport config, e.g. {'type': 'http', 'url': 'http://marquez:5000'}, "
            "{'type': 'file', 'log_file_path': 'lineage.jsonl'} or {'type': 'console'}",
            key="lineage",
        )
    inputs = value.get("inputs") or ()
    if not isinstance(inputs, Sequence) or not all(isinstance(i, Mapping) and {"namespace", "name"} <= set(i) for i in inputs):
        raise ConfigError("lineage.inputs is a list of {'namespace': ..., 'name': ...}", key="lineage")
    return LineageSettings(
        transport=dict(transport) if transport is not None else None,
        namespace=str(value.get("namespace") or DEFAULT_NAMESPACE),
        job=str(value["job"]) if value.get("job") else None,
        throttle_ms=parse_duration_ms(value.get("throttle", 0), key="lineage.throttle"),
        inputs=tuple(dict(i) for i in inputs),
        kafka_namespace=str(value.get("kafka_namespace") or "kafka"),
        queue=parse_int(value.get("queue", 1000), key="lineage.queue", minimum=1),
    )
