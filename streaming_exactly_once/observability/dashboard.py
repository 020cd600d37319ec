"""The Grafana dashboard shipped with the library, declared once as panels of PromQL.

``docs/observability/grafana-dashboard.json`` is ``build()`` (a test keeps it so; regenerate
with ``python -m streaming_exactly_once.observability.dashboard``). It asks for a Prometheus
data source when imported and filters by the ``table`` and ``query`` labels. The same
``PANELS`` are what the documentation's picture of the dashboard is drawn from
(``benchmarks/observability_dashboard.py``, against a real Prometheus).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the label filters every query of a panel carries (Grafana variables)
S = '{table=~"$table", query=~"$query"}'
TS = '{table=~"$table"}'
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Panel:
    title: str
    #: (PromQL, legend)
    targets: tuple[tuple[str, str], ...]
    #: Grafana's unit id: ``s``, ``short``, ``bytes``
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    width: int = 12
    description: str = ""


def _p(q: str, metric: str, by: str = "") -> str:
    return f"histogram_quantile({q}, sum by ({by}le) (rate({metric}_bucket{S}[{RATE}])))"


PANELS: tuple[Panel, ...] = (
    Panel("Since last commit", (("max by (table) (seo_last_commit_age_seconds" + S + ")", "{{table}}"),), "s", "stat", 6),
    Panel("Batch in flight", (("max by (table) (seo_batch_in_flight_seconds" + S + ")", "{{table}}"),), "s", "stat", 6),
    Panel("Commit p99", ((_p("0.99", "seo_commit_duration_seconds"), "p99"),), "s", "stat", 6),
    Panel(
        "Audit (1 passed, 0 failed)",
        (("min by (table) (seo_audit_passed" + TS + ")", "{{table}}"),),
        "short",
        "stat",
        6,
        "Empty until an exactly-once audit has run on the table.",
    ),
    Panel(
        "Commit latency",
        ((_p("0.5", "seo_commit_duration_seconds"), "p50"), (_p("0.99", "seo_commit_duration_seconds"), "p99")),
        "s",
    ),
    Panel("Commit phases, p99", ((_p("0.99", "seo_commit_phase_duration_seconds", "phase, "), "{{phase}}"),), "s"),
    Panel(
        "Rows per second",
        (
            (f"sum(rate(seo_rows_written_total{S}[{RATE}]))", "written"),
            (f"sum(rate(seo_rows_duplicate_total{S}[{RATE}]))", "dropped as duplicate"),
            (f"sum(rate(seo_rows_rejected_total{S}[{RATE}]))", "rejected"),
        ),
    ),
    Panel(
        "Batches",
        (
            (f"sum by (status) (increase(seo_batches_total{S}[{RATE}]))", "{{status}}"),
            (f"sum by (error) (increase(seo_batches_refused_total{S}[{RATE}]))", "refused: {{error}}"),
        ),
    ),
    Panel(
        "Stall watch",
        (
            (f"max by (table) (seo_last_commit_age_seconds{S})", "since last commit"),
            (f"max by (table) (seo_batch_in_flight_seconds{S})", "batch in flight"),
        ),
        "s",
    ),
    Panel("Source lag per partition", ((f"seo_source_lag_records{S}", "{{topic}}/{{partition}}"),), "short"),
    Panel("Event-time lag", ((f"seo_event_time_lag_seconds{S}", "{{column}}"),), "s"),
    Panel(
        "Small files",
        ((f"seo_live_files{TS}", "live files"), (f"seo_files_awaiting_compaction{TS}", "awaiting compaction")),
    ),
    Panel(
        "Writers",
        (
            (f"seo_lease_epoch{TS}", "lease epoch"),
            (f"increase(seo_lease_takeovers_total{TS}[{RATE}])", "takeovers"),
            (f"increase(seo_writer_fenced_total{TS}[{RATE}])", "fenced"),
        ),
    ),
    Panel("Lineage events", ((f"sum by (outcome) (increase(seo_lineage_events_total{S}[{RATE}]))", "{{outcome}}"),)),
)


def _variable(name: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": f"var-{name}"},
        "definition": query,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
    }


def _panel(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    height = 4 if panel.kind == "stat" else 8
    return {
        "id": pid,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": height},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"}} if panel.kind == "timeseries" else {},
        "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend} for i, (expr, legend) in enumerate(panel.targets)],
    }


def build() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (import it: Dashboards > New > Import)."""
    panels, x, y, row_height = [], 0, 0, 0
    for pid, panel in enumerate(PANELS, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        panels.append(_panel(panel, pid, x, y))
        row_height = max(row_height, panels[-1]["gridPos"]["h"])
        x += panel.width
    datasource = {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus", "current": {}}
    return {
        "title": "streaming-exactly-once",
        "uid": "streaming-exactly-once",
        "description": "Sinks of streaming-exactly-once: commits, latency, lag, freshness, small files, writers (metrics=...).",
        "tags": ["streaming-exactly-once", "spark"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                datasource,
                _variable("table", "label_values(seo_query_up, table)"),
                _variable("query", 'label_values(seo_query_up{table=~"$table"}, query)'),
            ]
        },
        "panels": panels,
    }


if __name__ == "__main__":  # python -m streaming_exactly_once.observability.dashboard [path]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/observability/grafana-dashboard.json")
    target.write_text(json.dumps(build(), indent=1) + "\n")
