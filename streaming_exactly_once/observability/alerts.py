"""The Prometheus alert rules shipped with the library, declared once with their thresholds.

``docs/observability/prometheus-alerts.yml`` is ``render()`` with the defaults (a test keeps it
so); a user who wants other thresholds edits that file or renders their own
(``python -m streaming_exactly_once.observability.alerts stalled_seconds=600 > rules.yml``).
Every metric an expression names is declared in ``catalog`` (a test checks that too).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass

#: every threshold a rule reads, and its default
DEFAULTS: dict[str, str] = {
    "stalled_seconds": "300",  # a batch running this long: stalled
    "stalled_for": "1m",
    "no_commit_seconds": "1800",  # no commit this long while the query runs
    "no_commit_for": "5m",
    "commit_p99_seconds": "30",
    "commit_p99_for": "10m",
    "lag_records": "1000",  # behind by more than this, and growing
    "lag_window": "15m",
    "lag_for": "15m",
    "event_time_lag_seconds": "3600",
    "event_time_for": "15m",
    "awaiting_files": "10000",
    "window": "10m",  # refused batches, fenced writers: counted over this window
    "job": "streaming-exactly-once",  # the scrape job of the sinks' processes
    "down_for": "5m",
}


@dataclass(frozen=True)
class Alert:
    name: str
    #: PromQL with ``{threshold}`` placeholders (``DEFAULTS``)
    expr: str
    for_: str
    severity: str
    summary: str
    description: str


def _new_or_increased(counter: str) -> str:
    """A counter that grew within the window - or appeared within it: ``increase`` needs two
    samples, and a series born at 1 (the first refusal of its kind) has only one."""
    return f"(sum by (table, query, error) (increase({counter}[{{window}}])) > 0) or ({counter} unless {counter} offset {{window}})"


ALERTS: tuple[Alert, ...] = (
    Alert(
        "SeoStreamStalled",
        "max by (table, query) (seo_batch_in_flight_seconds) > {stalled_seconds}",
        "{stalled_for}",
        "critical",
        "A batch of {{ $labels.table }} has been running for {{ $value | humanizeDuration }}",
        "Query {{ $labels.query }} started a batch and has not finished it: the stream is stalled (a hung storage call, "
        "a stuck Spark job, a frozen driver). `seo status` shows the writer; its thread dump shows where it waits.",
    ),
    Alert(
        "SeoNoRecentCommit",
        "seo_last_commit_age_seconds > {no_commit_seconds} and on (table, query) seo_query_up == 1",
        "{no_commit_for}",
        "warning",
        "No batch committed to {{ $labels.table }} for {{ $value | humanizeDuration }}",
        "The query runs but committed nothing: its source may be idle, or the stream is stuck before the sink. Raise "
        "no_commit_seconds for sources that are quiet this long.",
    ),
    Alert(
        "SeoMetricsDown",
        'up{{job="{job}"}} == 0',
        "{down_for}",
        "critical",
        "Prometheus cannot scrape {{ $labels.instance }}",
        "The driver writing the tables is gone or unreachable: its stall and lag metrics are gone with it.",
    ),
    Alert(
        "SeoCommitLatencyHigh",
        "histogram_quantile(0.99, sum by (table, query, le) (rate(seo_commit_duration_seconds_bucket[{window}]))) > {commit_p99_seconds}",
        "{commit_p99_for}",
        "warning",
        "Commit p99 of {{ $labels.table }} is {{ $value | humanizeDuration }}",
        "seo_commit_phase_duration_seconds shows which phase (wal, move, manifest, delta, iceberg, ...) is slow.",
    ),
    Alert(
        "SeoSourceLagGrowing",
        "sum by (table, query) (seo_source_lag_records) > {lag_records} and sum by (table, query) (delta(seo_source_lag_records[{lag_window}])) > 0",
        "{lag_for}",
        "warning",
        "{{ $labels.table }} is {{ $value }} records behind its source, and falling further behind",
        "The query reads slower than its source grows. Per-partition lag: seo_source_lag_records.",
    ),
    Alert(
        "SeoBatchesRefused",
        _new_or_increased("seo_batches_refused_total"),
        "0m",
        "warning",
        "A batch of {{ $labels.table }} failed or was refused ({{ $labels.error }})",
        "Nothing of the batch was published; Spark retries it when the query restarts. The driver log has the error.",
    ),
    Alert(
        "SeoWriterFenced",
        _new_or_increased("seo_writer_fenced_total").replace("table, query, error", "table"),
        "0m",
        "critical",
        "A writer of {{ $labels.table }} was fenced by a newer one",
        "Two writers ran for the table: the older one stopped publishing (nothing was lost or duplicated). Make sure only "
        "one query writes the table.",
    ),
    Alert(
        "SeoAuditFailed",
        "seo_audit_passed == 0",
        "0m",
        "critical",
        "The exactly-once audit of {{ $labels.table }} failed",
        "The table's latest audit found a broken invariant (a duplicate, a gap, rows not conserved).",
    ),
    Alert(
        "SeoEventTimeStale",
        "seo_event_time_lag_seconds > {event_time_lag_seconds} and on (table, query) seo_query_up == 1",
        "{event_time_for}",
        "warning",
        "The newest {{ $labels.column }} in {{ $labels.table }} is {{ $value | humanizeDuration }} old",
        "Event-time freshness of the committed data is beyond the threshold.",
    ),
    Alert(
        "SeoSmallFileBacklog",
        "seo_files_awaiting_compaction > {awaiting_files}",
        "1h",
        "warning",
        "{{ $labels.table }} has {{ $value }} small files",
        "Turn compaction on, or run `seo compact` on the table while it is stopped.",
    ),
)


def render(values: Mapping[str, str] | None = None) -> str:
    """The rule file (YAML; every string quoted as JSON, which YAML reads the same)."""
    params = {**DEFAULTS, **(values or {})}
    lines = ["# Alert rules of streaming-exactly-once sinks (generated: streaming_exactly_once/observability/alerts.py).", "groups:"]
    lines += ["  - name: streaming-exactly-once", "    rules:"]
    for alert in ALERTS:
        lines += [
            f"      - alert: {alert.name}",
            f"        expr: {json.dumps(alert.expr.format(**params))}",
            f"        for: {alert.for_.format(**params)}",
            "        labels:",
            f"          severity: {alert.severity}",
            "        annotations:",
            f"          summary: {json.dumps(alert.summary)}",
            f"          description: {json.dumps(alert.description)}",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m streaming_exactly_once.observability.alerts key=value ...
    sys.stdout.write(render(dict(arg.split("=", 1) for arg in sys.argv[1:])))
