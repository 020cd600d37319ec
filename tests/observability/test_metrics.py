"""The sink's metrics without Spark: real commits of the commit layer, recorded by ``SinkMetrics``,
scraped over HTTP from the Prometheus endpoint and read through a real OpenTelemetry SDK (an
in-memory reader, and the OTLP/HTTP exporter against a receiver in the test)."""

from __future__ import annotations

import gzip
import http.server
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import replace

import pytest

from streaming_exactly_once.commit.protocol.attempt import CommitResult
from streaming_exactly_once.errors import ConfigError, WriterFencedError
from streaming_exactly_once.observability.backlog import small_file_backlog
from streaming_exactly_once.observability.catalog import METRICS
from streaming_exactly_once.observability.freshness import event_time_seconds, newest_event_times, source_lag
from streaming_exactly_once.observability.settings import MetricsSettings, lineage_settings, metrics_settings
from streaming_exactly_once.observability.sink_metrics import SinkMetrics
from streaming_exactly_once.observability.store import MetricStore
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer, stage_and_commit, stage_file

prometheus_client = pytest.importorskip("prometheus_client", reason="the metrics extra (make test installs it)")
QUERY = "11111111-2222-3333-4444-555555555555"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples, name, **labels):
    matches = [v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == str(x) for k, x in labels.items())]
    assert matches, f"no sample {name}{labels}; have {sorted({n for n, _ in samples})}"
    return sum(matches)


@pytest.fixture
def table(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    committer = make_committer(storage)
    yield storage, committer
    committer.close()


def test_committed_batches_reach_the_prometheus_endpoint_with_every_figure(table):
    from streaming_exactly_once.observability.prometheus_export import serve

    storage, committer = table
    metrics = SinkMetrics(storage.root_uri, backlog=lambda: small_file_backlog(storage))
    results = []
    for batch in range(3):
        metrics.batch_started()
        result = stage_and_commit(committer, QUERY, batch, list(range(batch * 10, batch * 10 + 10)))
        metrics.batch_done(result, epoch=committer.lease.epoch)
        results.append(result)
    metrics.batch_started()
    metrics.batch_done(CommitResult(QUERY, 1, "duplicate"))  # Spark replayed batch 1: skipped
    with committer.batch("another-query", 0, mode="rename") as attempt:  # one small Parquet file
        staged = stage_file(storage, attempt, "p=b/part-00000.snappy.parquet", b"PAR1 small PAR1")
        committer.commit(attempt, [staged], input_files=[], num_rows=1)

    samples = scrape(serve("127.0.0.1", 0))
    t = {"table": storage.root_uri}
    q = {**t, "query": QUERY}
    assert value(samples, "seo_batches_total", status="committed", **q) == 3
    assert value(samples, "seo_batches_total", status="duplicate", **q) == 1
    assert value(samples, "seo_rows_written_total", **q) == 30
    assert value(samples, "seo_rows_in_total", **q) == 30
    assert value(samples, "seo_files_written_total", **q) == 6
    assert value(samples, "seo_bytes_written_total", **q) == sum(r.record.num_bytes for r in results)
    assert value(samples, "seo_commit_duration_seconds_count", **q) == 3
    assert value(samples, "seo_batch_duration_seconds_count", **q) == 4
    phases = {dict(ls)["phase"] for n, ls in samples if n == "seo_commit_phase_duration_seconds_count" and dict(ls)["table"] == t["table"]}
    assert {"wal", "manifest", "commit"} <= phases, phases
    assert value(samples, "seo_last_batch_id", **q) == 2
    assert time.time() - value(samples, "seo_last_commit_timestamp_seconds", **q) < 60
    assert 0 <= value(samples, "seo_last_commit_age_seconds", **q) < 60
    assert value(samples, "seo_batch_in_flight_seconds", **q) == 0
    assert value(samples, "seo_query_up", **q) == 1
    assert value(samples, "seo_lease_epoch", **t) == committer.lease.epoch
    assert value(samples, "seo_live_files", **t) == 7  # two files a batch, from the manifest
    assert value(samples, "seo_files_awaiting_compaction", **t) == 1  # the small Parquet file (not the .txt ones)
    assert not [n for n, ls in samples if n.startswith("seo_audit") and dict(ls).get("table") == t["table"]]  # no audit yet


def test_a_takeover_and_the_fenced_writer_are_counted(tmp_path):
    """A writer whose lease expired is taken over (seo_lease_takeovers_total of the new one) and its
    next batch is refused (seo_writer_fenced_total, seo_batches_refused_total by error type)."""
    storage = open_storage(str(tmp_path / "t"))
    old = make_committer(storage, timeout_ms=1000)
    store = MetricStore()
    old_metrics = SinkMetrics(storage.root_uri + "#old", store=store)
    old_metrics.batch_done(stage_and_commit(old, QUERY, 0, [1, 2]), epoch=old.lease.epoch)
    time.sleep(1.2)  # no heartbeat thread: the lease expires
    new = make_committer(open_storage(str(tmp_path / "t")), timeout_ms=1000)
    new.ensure_open()
    assert new.lease.took_over_from is not None and "expired" in new.lease.took_over_from
    new_metrics = SinkMetrics(storage.root_uri, store=store)
    new_metrics.batch_done(stage_and_commit(new, QUERY, 1, [3, 4]), epoch=new.lease.epoch, took_over=True)
    with pytest.raises(WriterFencedError) as fenced:
        stage_and_commit(old, QUERY, 2, [5, 6])
    old_metrics.batch_refused(QUERY, fenced.value, epoch=old.lease.epoch)
    assert dict(store.series("seo_lease_takeovers")) == {(storage.root_uri,): 1.0}
    assert dict(store.series("seo_writer_fenced")) == {(storage.root_uri + "#old",): 1.0}
    assert dict(store.series("seo_batches_refused")) == {(storage.root_uri + "#old", QUERY, "WriterFencedError"): 1.0}
    new.close()


def test_series_do_not_grow_with_batches_and_an_ended_query_leaves_none_behind(table):
    storage, committer = table
    store = MetricStore()
    metrics = SinkMetrics(storage.root_uri, store=store)
    first = stage_and_commit(committer, QUERY, 0, [1, 2, 3])
    first = replace(first, record=replace(first.record, watermarks={"ts": {"min": "2026-01-01T00:00:00", "max": "2026-01-01T00:10:00"}}))

    def series_count():
        snap = store.snapshot()
        return sum(len(v) for v in snap.values.values()) + sum(len(h) for h in snap.histograms.values())

    for batch in range(10):
        metrics.batch_done(replace(first, spark_batch_id=batch, batch_id=batch))
    after_ten = series_count()
    for batch in range(10, 500):
        metrics.batch_done(replace(first, spark_batch_id=batch, batch_id=batch))
    assert series_count() == after_ten
    other = "99999999-2222-3333-4444-555555555555"
    metrics.batch_done(replace(first, query_id=other))  # a recreated checkpoint: a new query id
    assert not [labels for name in ("seo_rows_written", "seo_query_up") for labels, _ in store.series(name) if QUERY in labels]
    assert series_count() <= after_ten


def test_otel_sdk_reads_the_same_metrics(table):
    sdk = pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from streaming_exactly_once.observability.otel_export import OtelExport

    storage, committer = table
    store = MetricStore()
    reader = InMemoryMetricReader()
    provider = sdk.MeterProvider(metric_readers=[reader])
    export = OtelExport(provider, store)
    metrics = SinkMetrics(storage.root_uri, store=store)
    for batch in range(2):
        metrics.batch_started()
        metrics.batch_done(stage_and_commit(committer, QUERY, batch, [batch * 2, batch * 2 + 1]))
    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points[m.name] = list(m.data.data_points)
    export.close()
    provider.shutdown()
    assert sum(p.value for p in points["seo_batches"] if p.attributes["status"] == "committed") == 2
    assert sum(p.value for p in points["seo_rows_written"]) == 4
    commit = points["seo_commit_duration_seconds"]
    assert sum(p.count for p in commit) == 2 and list(commit[0].explicit_bounds)[:2] == [0.0005, 0.001]
    assert {p.attributes["phase"] for p in points["seo_commit_phase_duration_seconds"]} >= {"manifest", "commit"}
    assert [p.value for p in points["seo_query_up"]] == [1.0]
    assert set(points) <= {m.name for m in METRICS}


class _OtlpReceiver(http.server.BaseHTTPRequestHandler):
    received: list[bytes] = []

    def do_POST(self):  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        type(self).received.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_otlp_export_when_only_the_endpoint_is_configured(table, monkeypatch):
    """No MeterProvider set, ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` set: the sink's metrics go over
    OTLP/HTTP (protobuf) to it - here a receiver in the test that decodes what arrives."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    from streaming_exactly_once.observability import otel_export

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OtlpReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}/v1/metrics")
    try:
        export = otel_export.export_through_otel()
        assert export is not None
        storage, committer = table
        metrics = SinkMetrics(storage.root_uri)
        metrics.batch_done(stage_and_commit(committer, QUERY, 0, [1, 2, 3]))
        export.provider.force_flush()
    finally:
        otel_export.stop_exporting()
        server.shutdown()
    names = set()
    for body in _OtlpReceiver.received:
        request = ExportMetricsServiceRequest.FromString(body)
        names |= {m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"seo_batches", "seo_rows_written", "seo_commit_duration_seconds"} <= names


def test_the_options_are_checked_when_the_sink_is_built():
    assert metrics_settings(None) is None and metrics_settings(False) is None
    assert metrics_settings(True) == MetricsSettings(port=None)
    assert metrics_settings(9108) == MetricsSettings(port=9108)
    assert metrics_settings("127.0.0.1:9108") == MetricsSettings("127.0.0.1", 9108)
    assert metrics_settings("[::1]:0") == MetricsSettings("::1", 0)
    for bad in ("nine", 70000, "host:x", 1.5):
        with pytest.raises(ConfigError, match="metrics"):
            metrics_settings(bad)
    assert lineage_settings({"throttle": "1m"}).throttle_ms == 60_000
    for bad in ({"transport": "http"}, {"throttel": "1m"}, {"inputs": [{"name": "x"}]}, "yes"):
        with pytest.raises(ConfigError, match="lineage"):
            lineage_settings(bad)


def test_a_sink_without_metrics_imports_none_of_their_packages(tmp_path):
    code = f"""
import sys
from streaming_exactly_once import ExactlyOnceSink
sink = ExactlyOnceSink({str(tmp_path / "t")!r})
assert sink._observer is None and not sink._observing
loaded = [m for m in ("prometheus_client", "opentelemetry.sdk", "openlineage") if m in sys.modules]
assert not loaded, loaded
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_source_lag_and_event_time_from_what_spark_and_the_commit_report():
    # the shape of a Kafka source's entry in StreamingQueryProgress.json (Spark 4)
    progress = {
        "sources": [
            {
                "description": "KafkaV2[Subscribe[events]]",
                "startOffset": {"events": {"0": 90, "1": 40}},
                "endOffset": {"events": {"0": 100, "1": 50}},
                "latestOffset": {"events": {"0": 130, "1": 50}},
            },
            {"description": "FileStreamSource[file:/in]", "endOffset": {"logOffset": 3}, "latestOffset": None},
        ]
    }
    assert sorted(source_lag(progress)) == [("events", "0", 30), ("events", "1", 0)]
    assert list(source_lag(None)) == []
    assert event_time_seconds("2026-01-01T00:00:00+00:00") == 1767225600.0
    assert event_time_seconds(42) is None and event_time_seconds("hello") is None
    assert newest_event_times({"ts": {"max": "2026-01-01T00:00:00Z"}, "id": {"max": 7}}) == {"ts": 1767225600.0}
