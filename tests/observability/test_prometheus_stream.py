"""A running stream scraped by a real Prometheus server: the sink's metrics arrive through its
HTTP API with the stream's true figures, and the stall alert fires while a batch is held inside
its commit on purpose (the shipped rules, rendered with short thresholds)."""

from __future__ import annotations

import shutil
from urllib.parse import urlsplit

import pytest

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.observability import alerts

from . import stall
from .prometheus import PROMETHEUS_MISSING, start_prometheus

pytestmark = [pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("prometheus_client", reason="the metrics extra (make test installs it)")


def values(result):
    return {tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("instance", "job"))): float(r["value"][1]) for r in result}


def test_prometheus_scrapes_a_running_stream_and_the_stall_alert_fires(spark, tmp_path):
    if shutil.which("prometheus") is None:
        pytest.skip(PROMETHEUS_MISSING)
    stall.STALLED.clear()
    stall.RELEASE.clear()
    table = tmp_path / "t"
    sink = ExactlyOnceSink(
        str(table),
        watermark_columns=["timestamp"],
        metrics="127.0.0.1:0",
        storage_wrapper="tests.observability.stall:wrap",
    )
    stream = spark.readStream.format("rate").option("rowsPerSecond", 20).option("numPartitions", 1).load()
    query = sink.start(stream, checkpoint_location=str(tmp_path / "ckpt"), trigger={"processingTime": "1 second"})
    rules = alerts.render({"stalled_seconds": "3", "stalled_for": "1s"})
    prometheus = None
    try:
        endpoint = urlsplit(sink.metrics_endpoint)
        prometheus = start_prometheus(tmp_path / "prometheus", [endpoint.netloc], rules=rules)
        uri = sink.storage.root_uri
        sel = f'{{table="{uri}"}}'
        committed = prometheus.wait_for(
            f'seo_batches_total{{table="{uri}",status="committed"}}', lambda r: r and float(r[0]["value"][1]) >= 2, timeout=300
        )
        assert committed and float(committed[0]["value"][1]) >= 2, committed
        (query_label,) = {r["metric"]["query"] for r in committed}
        assert query_label == str(query.id)
        phases = {r["metric"]["phase"] for r in prometheus.query(f"seo_commit_phase_duration_seconds_count{sel}")}
        assert {"prepare", "stage", "wal", "manifest", "commit"} <= phases, phases
        assert prometheus.query(f"seo_query_up{sel}")[0]["value"][1] == "1"
        fresh = prometheus.wait_for(f"seo_event_time_lag_seconds{sel}", bool, timeout=120)
        assert fresh and fresh[0]["metric"]["column"] == "timestamp" and 0 <= float(fresh[0]["value"][1]) < 600

        # the third batch waits inside its commit: the stream is stalled
        assert stall.STALLED.wait(timeout=300), "the third batch never reached its commit"
        in_flight = prometheus.wait_for(f"seo_batch_in_flight_seconds{sel}", lambda r: r and float(r[0]["value"][1]) > 3, timeout=120)
        assert in_flight and float(in_flight[0]["value"][1]) > 3, in_flight
        firing = []
        for _ in range(60):
            firing = prometheus.firing("SeoStreamStalled")
            if firing:
                break
            prometheus.wait_for("vector(1)", lambda r: False, timeout=0.5)
        assert firing, prometheus.api("alerts")
        assert firing[0]["labels"]["table"] == uri and firing[0]["labels"]["severity"] == "critical"
        assert firing[0]["annotations"]["summary"].startswith(f"A batch of {uri} has been running for")
        stall.RELEASE.set()
        moving = prometheus.wait_for(
            f'seo_batches_total{{table="{uri}",status="committed"}}', lambda r: r and float(r[0]["value"][1]) >= 4, timeout=300
        )
        assert moving and float(moving[0]["value"][1]) >= 4, moving
        assert float(prometheus.query(f"seo_batch_in_flight_seconds{sel}")[0]["value"][1]) < 3
    finally:
        stall.RELEASE.set()
        sink.stop()
        if prometheus is not None:
            # after the stop: the last scrape has every committed row
            written = spark.read.parquet(str(table)).count()
            final = prometheus.wait_for(
                f'seo_rows_written_total{{table="{sink.storage.root_uri}"}}', lambda r: r and float(r[0]["value"][1]) == written, timeout=30
            )
            prometheus.stop()
    assert final and float(final[0]["value"][1]) == written > 0, (final, written)
