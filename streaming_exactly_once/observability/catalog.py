"""Every metric the sinks export, declared once: name, type, labels, help, unit and buckets.

The Prometheus collector, the OpenTelemetry instruments, the documentation's metrics table, the
alert rules and the dashboard all read ``METRICS``; nothing else names a metric. Names follow
Prometheus' conventions: an ``seo_`` prefix, base units (seconds, bytes) in the name, and a
counter's exposed name ends in ``_total`` (declared here without it, as OpenTelemetry names it).

No label grows with batches or files: ``table`` and ``query`` are the sinks and their queries,
``phase`` a commit step kind, ``status`` and ``error`` fixed sets of outcomes and exception
types, ``topic``/``partition`` the source's own partitions and ``column`` a watermark column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]

#: Seconds, from half a millisecond (a bookkeeping write) to ten minutes (a large batch).
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

TQ = ("table", "query")


@dataclass(frozen=True)
class Metric:
    """One metric: ``name`` as OpenTelemetry spells it (Prometheus adds ``_total`` to a counter)."""

    name: str
    kind: Kind
    labels: tuple[str, ...]
    help: str
    #: the unit OpenTelemetry is told (UCUM: ``s``, ``By``, ``1``)
    unit: str = "1"
    buckets: tuple[float, ...] = ()
    #: computed when it is read (an age, a lag), not recorded by a batch
    computed: bool = False

    @property
    def exposed(self) -> str:
        """The name Prometheus shows (the series of a histogram add ``_bucket``, ``_sum``, ``_count``)."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


METRICS: tuple[Metric, ...] = (
    # -- batches and rows ------------------------------------------------------------------------
    Metric(
        "seo_batches",
        "counter",
        (*TQ, "status"),
        "Batches the sink handled, by outcome: committed, duplicate (a replay of a committed batch, skipped) or empty.",
    ),
    Metric(
        "seo_batches_refused",
        "counter",
        (*TQ, "error"),
        "Batches that failed or were refused, by exception type; nothing of them was published.",
    ),
    Metric("seo_rows_in", "counter", TQ, "Rows the committed batches brought: written plus dropped as duplicates."),
    Metric("seo_rows_written", "counter", TQ, "Rows committed to the table."),
    Metric(
        "seo_rows_duplicate",
        "counter",
        TQ,
        "Rows dropped because the table already holds them (input files or source offsets committed earlier).",
    ),
    Metric("seo_rows_rejected", "counter", TQ, "Rows a dataset group's checks quarantined (policy='partial')."),
    Metric("seo_files_written", "counter", TQ, "Data files committed."),
    Metric("seo_bytes_written", "counter", TQ, "Bytes of data files committed.", unit="By"),
    # -- latency ---------------------------------------------------------------------------------
    Metric(
        "seo_batch_duration_seconds",
        "histogram",
        TQ,
        "Whole batches: the sink's call from Spark, writing and committing.",
        unit="s",
        buckets=SECONDS_BUCKETS,
    ),
    Metric(
        "seo_commit_duration_seconds",
        "histogram",
        TQ,
        "Commits: from the claim to the commit record (the bookkeeping steps that run together count once).",
        unit="s",
        buckets=SECONDS_BUCKETS,
    ),
    Metric(
        "seo_commit_phase_duration_seconds",
        "histogram",
        (*TQ, "phase"),
        "Each phase of a batch: prepare, stage (Spark's write), intent, wal, move, schema, manifest, delta, iceberg, "
        "offsets, sources, commit, cleanup, and the checks and waits around them.",
        unit="s",
        buckets=SECONDS_BUCKETS,
    ),
    # -- liveness --------------------------------------------------------------------------------
    Metric("seo_last_commit_timestamp_seconds", "gauge", TQ, "When the last batch was committed (Unix time).", unit="s"),
    Metric(
        "seo_last_commit_age_seconds",
        "gauge",
        TQ,
        "Seconds since the last committed batch (since the query started here, before its first).",
        unit="s",
        computed=True,
    ),
    Metric(
        "seo_batch_in_flight_seconds",
        "gauge",
        TQ,
        "How long the batch being written has been running; 0 between batches.",
        unit="s",
        computed=True,
    ),
    Metric("seo_query_up", "gauge", TQ, "1 while this process writes the table for the query, 0 once it let the table go."),
    Metric("seo_last_batch_id", "gauge", TQ, "The table's batch id (its _spark_metadata batch) of the last commit."),
    # -- sources ---------------------------------------------------------------------------------
    Metric(
        "seo_source_lag_records",
        "gauge",
        (*TQ, "topic", "partition"),
        "Records the source holds beyond what the query has read, per partition (Spark's progress: latestOffset - endOffset; Kafka).",
        computed=True,
    ),
    Metric(
        "seo_event_time_max_timestamp_seconds",
        "gauge",
        (*TQ, "column"),
        "The newest event time committed, per watermark column (Unix time).",
        unit="s",
    ),
    Metric(
        "seo_event_time_lag_seconds",
        "gauge",
        (*TQ, "column"),
        "Event-time freshness: seconds between now and the newest event time committed, per watermark column.",
        unit="s",
        computed=True,
    ),
    # -- the table -------------------------------------------------------------------------------
    Metric("seo_live_files", "gauge", ("table",), "Data files the table's manifest lists (read at most once a minute).", computed=True),
    Metric(
        "seo_files_awaiting_compaction",
        "gauge",
        ("table",),
        "Live Parquet files under half the compaction target size: what compaction would rewrite (read at most once a minute).",
        computed=True,
    ),
    Metric("seo_lease_epoch", "gauge", ("table",), "The lease epoch this process writes the table in (the fencing token)."),
    Metric(
        "seo_lease_takeovers",
        "counter",
        ("table",),
        "Times this process took the table over from a writer that had not let it go (crashed, expired, or an ended run).",
    ),
    Metric("seo_writer_fenced", "counter", ("table",), "Batches refused because a newer writer fenced this one (WriterFencedError)."),
    Metric(
        "seo_audit_passed",
        "gauge",
        ("table",),
        "The table's latest exactly-once audit verdict: 1 passed, 0 failed; absent while no audit has run.",
        computed=True,
    ),
    Metric(
        "seo_audit_timestamp_seconds",
        "gauge",
        ("table",),
        "When the latest audit verdict was reached (Unix time); absent while no audit has run.",
        unit="s",
        computed=True,
    ),
    # -- lineage ---------------------------------------------------------------------------------
    Metric(
        "seo_lineage_events",
        "counter",
        (*TQ, "outcome"),
        "OpenLineage events, by outcome: emitted, throttled (folded into the next event), dropped (queue full) or failed.",
    ),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    """The declaration of ``name`` (a ``KeyError`` names a metric that was never declared)."""
    return BY_NAME[name]


def markdown_table() -> str:
    """The documentation's metrics table (the ``<!-- metrics -->`` marker of a docs page)."""
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for m in METRICS:
        labels = ", ".join(f"`{label}`" for label in m.labels)
        lines.append(f"| `{m.exposed}` | {m.kind} | {labels} | {m.help.replace('|', '/')} |")
    return "\n".join(lines)
