"""The shipped alert rules and dashboard: generated from their declarations, naming only declared
metrics, accepted by ``promtool check rules``, and each alert proven by ``promtool test rules``
(series fed to Prometheus' own rule engine: firing when it must, silent before)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from streaming_exactly_once.observability import alerts, dashboard
from streaming_exactly_once.observability.catalog import METRICS

from .prometheus import PROMTOOL_MISSING, REPO

RULES = REPO / "docs/observability/prometheus-alerts.yml"
DASHBOARD = REPO / "docs/observability/grafana-dashboard.json"
T, Q = 'table="t",query="q"', {"table": "t", "query": "q"}


def test_the_shipped_files_are_what_their_declarations_generate():
    assert RULES.read_text() == alerts.render(), "regenerate: python -m streaming_exactly_once.observability.alerts > " + str(RULES)
    assert json.loads(DASHBOARD.read_text()) == dashboard.build(), "regenerate: python -m streaming_exactly_once.observability.dashboard"


def _names(expr: str) -> set[str]:
    exposed = {m.exposed for m in METRICS} | {f"{m.name}_{s}" for m in METRICS if m.kind == "histogram" for s in ("bucket", "sum", "count")}
    found = set(re.findall(r"\bseo_[a-z_]+", expr))
    return found - exposed


def test_rules_and_dashboard_name_only_declared_metrics():
    for alert in alerts.ALERTS:
        assert not _names(alert.expr), (alert.name, _names(alert.expr))
    exprs = [target["expr"] for panel in dashboard.build()["panels"] for target in panel.get("targets", [])]
    assert exprs and all(not _names(e) for e in exprs), [_names(e) for e in exprs if _names(e)]
    variables = [v["query"]["query"] for v in dashboard.build()["templating"]["list"] if v["type"] == "query"]
    assert all(not _names(v) for v in variables)


def _promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(PROMTOOL_MISSING)
    return path


def test_promtool_accepts_the_rules():
    done = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(alerts.ALERTS)} rules found" in done.stdout


def _annotations(name: str, labels: dict[str, str], value: str) -> dict[str, str]:
    alert = next(a for a in alerts.ALERTS if a.name == name)

    def fill(text: str) -> str:
        for key, label in labels.items():
            text = text.replace("{{ $labels.%s }}" % key, label)
        return text.replace("{{ $value | humanizeDuration }}", value).replace("{{ $value }}", value)

    return {"summary": fill(alert.summary), "description": fill(alert.description)}


def _case(name, series, fires_at, quiet_at, labels, value):
    """One alert: the input series (1m apart), a time it must fire at (with its labels and
    annotations) and a time it must not."""
    severity = next(a.severity for a in alerts.ALERTS if a.name == name)
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [
            {"eval_time": quiet_at, "alertname": name, "exp_alerts": []},
            {
                "eval_time": fires_at,
                "alertname": name,
                "exp_alerts": [{"exp_labels": {**labels, "severity": severity}, "exp_annotations": _annotations(name, labels, value)}],
            },
        ],
    }


CASES = [
    # a batch in flight for more than 5 minutes, for a minute
    _case("SeoStreamStalled", [(f"seo_batch_in_flight_seconds{{{T}}}", "0+60x10")], "8m", "6m", Q, "8m 0s"),
    _case(
        "SeoNoRecentCommit",
        [(f"seo_last_commit_age_seconds{{{T}}}", "0+60x40"), (f"seo_query_up{{{T}}}", "1x40")],
        "38m",
        "33m",
        Q,
        "38m 0s",
    ),
    _case(
        "SeoMetricsDown",
        [('up{job="streaming-exactly-once",instance="driver:9108"}', "1 1 0x10")],
        "8m",
        "5m",
        {"job": "streaming-exactly-once", "instance": "driver:9108"},
        "",
    ),
    _case(
        "SeoCommitLatencyHigh",  # every commit takes 10-60 s: the p99 interpolates to 59.5 s
        [
            (f'seo_commit_duration_seconds_bucket{{{T},le="10.0"}}', "0x40"),
            (f'seo_commit_duration_seconds_bucket{{{T},le="60.0"}}', "0+1x40"),
            (f'seo_commit_duration_seconds_bucket{{{T},le="+Inf"}}', "0+1x40"),
        ],
        "25m",
        "9m",
        Q,
        "59.5s",
    ),
    _case(
        "SeoSourceLagGrowing",
        [(f'seo_source_lag_records{{{T},topic="e",partition="0"}}', "0+100x40")],
        "30m",
        "20m",
        Q,
        "3000",
    ),
    _case(
        "SeoBatchesRefused",  # the first refusal of its kind is a new series: it fires too
        [(f'seo_batches_refused_total{{{T},error="InjectedFailure"}}', "_x3 1x16 2x5")],
        "4m",
        "16m",
        {**Q, "error": "InjectedFailure"},
        "",
    ),
    _case("SeoWriterFenced", [('seo_writer_fenced_total{table="t"}', "_x3 1x20")], "4m", "2m", {"table": "t"}, ""),
    _case("SeoAuditFailed", [('seo_audit_passed{table="t"}', "1 1 0 0")], "3m", "1m", {"table": "t"}, ""),
    _case(
        "SeoEventTimeStale",
        [(f'seo_event_time_lag_seconds{{{T},column="ts"}}', "0+300x40"), (f"seo_query_up{{{T}}}", "1x40")],
        "30m",
        "20m",
        {**Q, "column": "ts"},
        "2h 30m 0s",
    ),
    _case("SeoSmallFileBacklog", [('seo_files_awaiting_compaction{table="t"}', "20000x70")], "65m", "30m", {"table": "t"}, "20000"),
]


def test_promtool_unit_tests_prove_each_alert(tmp_path):
    assert {c["alert_rule_test"][0]["alertname"] for c in CASES} == {a.name for a in alerts.ALERTS}
    # promtool reads YAML; JSON is YAML
    spec = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": CASES}
    path = tmp_path / "alerts_test.yml"
    path.write_text(json.dumps(spec, indent=1))
    done = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]


def test_promtool_unit_tests_fail_on_a_wrong_expectation(tmp_path):
    """The harness itself: an alert expected where it cannot fire makes promtool fail."""
    wrong = json.loads(json.dumps(CASES[0]))
    wrong["alert_rule_test"][0]["exp_alerts"] = wrong["alert_rule_test"][1]["exp_alerts"]  # firing at 6m: too early
    path = tmp_path / "wrong_test.yml"
    path.write_text(json.dumps({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [wrong]}))
    done = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "SeoStreamStalled" in done.stdout + done.stderr
