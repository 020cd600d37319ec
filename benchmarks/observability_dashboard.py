"""The documentation's picture of the dashboard, drawn from a real run (Grafana is not installable
where this project is built, so this is not a Grafana screenshot).

A rate source streams into a Parquet table with ``watermark_columns``, ``metrics`` and ``lineage``
on; a real Prometheus (Debian's) scrapes it every second with the shipped alert rules (stall
thresholds shortened); one batch is held inside its commit for a while. Then every panel of the
dashboard (``observability.dashboard.PANELS``, the queries the Grafana JSON holds) is queried over
the run from Prometheus' HTTP API and drawn with matplotlib; the span where ``SeoStreamStalled``
fired is shaded.

    python -m benchmarks.observability_dashboard [--seconds 150] [--out docs/img/observability-dashboard.png]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from streaming_exactly_once.storage.base import Storage

HOLD = threading.Event()
HELD = threading.Event()  # the held batch reached its commit
HELD_AT = 8  # the batch held in its commit (its WAL claim)


def _hold() -> None:
    HELD.set()
    HOLD.wait(timeout=600)


def wrap(storage: Storage) -> Storage:
    """The sink's ``storage_wrapper``: holds batch ``HELD_AT`` after its WAL claim until ``HOLD``."""
    from streaming_exactly_once.testing.faults import FaultInjectingStorage, call_at

    return FaultInjectingStorage(storage, [call_at(f"after-wal@{HELD_AT}", _hold)])


def run_stream(work: Path, seconds: float, hold_s: float) -> tuple[Any, float, float, str]:
    """The stream and Prometheus; returns (prometheus, start, end, table URI)."""
    from pyspark.sql import SparkSession

    from streaming_exactly_once import ExactlyOnceSink
    from streaming_exactly_once.observability import alerts
    from tests.observability.prometheus import start_prometheus

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sink = ExactlyOnceSink(
        str(work / "events"),
        watermark_columns=["timestamp"],
        metrics="127.0.0.1:0",
        lineage={"transport": {"type": "file", "log_file_path": str(work / "lineage.jsonl"), "append": True}, "throttle": "5s"},
        storage_wrapper=f"{__name__}:wrap",
    )
    stream = spark.readStream.format("rate").option("rowsPerSecond", 200).option("numPartitions", 2).load()
    query = sink.start(stream, checkpoint_location=str(work / "ckpt"), trigger={"processingTime": "1 second"}, query_name="events-ingest")
    rules = alerts.render({"stalled_seconds": "15", "stalled_for": "5s", "no_commit_seconds": "40", "no_commit_for": "5s"})
    prometheus = start_prometheus(work / "prometheus", [urlsplit(sink.metrics_endpoint or "").netloc], rules=rules)
    start = time.time()
    held_since = None
    while time.time() - start < seconds and query.isActive:
        if held_since is None and HELD.is_set():
            held_since = time.time()
        if held_since is not None and time.time() - held_since > hold_s:
            HOLD.set()
        time.sleep(1)
    HOLD.set()
    time.sleep(3)  # a last scrape
    end = time.time()
    sink.stop()
    spark.stop()
    return prometheus, start, end, sink.storage.root_uri


def _range(prometheus: Any, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    expr = expr.replace("$table", ".*").replace("$query", ".*").replace("$__rate_interval", "30s")
    return list(prometheus.api("query_range", query=expr, start=str(start), end=str(end), step="2")["result"])


def _legend(template: str, labels: dict[str, str]) -> str:
    for key, value in labels.items():
        template = template.replace("{{%s}}" % key, value.rsplit("/", 1)[-1] if key == "table" else value)
    return template


def draw(prometheus: Any, start: float, end: float, out: Path) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from streaming_exactly_once.observability.dashboard import PANELS

    firing = _range(prometheus, 'ALERTS{alertname="SeoStreamStalled",alertstate="firing"}', start, end)
    spans: list[tuple[float, float]] = []  # contiguous runs of the firing series (absent while not firing)
    for series in firing:
        for t, _ in series["values"]:
            at = float(t) - start
            if spans and at - spans[-1][1] <= 4:
                spans[-1] = (spans[-1][0], at)
            else:
                spans.append((at, at))
    stats = [p for p in PANELS if p.kind == "stat"]
    graphs = [p for p in PANELS if p.kind != "stat"]
    rows = 1 + (len(graphs) + 1) // 2
    fig = plt.figure(figsize=(16, 3.2 * rows), dpi=90)
    grid = fig.add_gridspec(rows, 4, height_ratios=[0.55] + [1] * (rows - 1), hspace=0.55, wspace=0.3)
    shown: dict[str, Any] = {}
    for i, panel in enumerate(stats):
        ax = fig.add_subplot(grid[0, i])
        ax.axis("off")
        values = [float(s["values"][-1][1]) for expr, _ in panel.targets for s in _range(prometheus, expr, end - 10, end)]
        text = "no data" if not values else f"{max(values):.2f} s" if panel.unit == "s" else f"{max(values):g}"
        shown[panel.title] = text
        ax.set_title(panel.title, fontsize=11, loc="left")
        ax.text(0.02, 0.25, text, fontsize=22, color="#3b7d23" if values else "#888888", transform=ax.transAxes)
    for i, panel in enumerate(graphs):
        ax = fig.add_subplot(grid[1 + i // 2, (i % 2) * 2 : (i % 2) * 2 + 2])
        lines = 0
        for expr, legend in panel.targets:
            for series in _range(prometheus, expr, start, end):
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, linewidth=1.4, label=_legend(legend, series["metric"]))
                lines += 1
        for a, b in spans:
            ax.axvspan(a, max(b, a + 2), color="#d62728", alpha=0.12)
        if panel.title.startswith("Commit phases") and lines:
            ax.set_yscale("log")  # Spark's write (stage) dwarfs the bookkeeping phases
        ax.set_title(
            panel.title + (f" ({panel.unit}{', log scale' if ax.get_yscale() == 'log' else ''})" if panel.unit == "s" else ""),
            fontsize=11,
            loc="left",
        )
        ax.set_xlim(0, end - start)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if lines:
            ax.legend(fontsize=7, loc="upper left", ncol=3)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", color="#888888", transform=ax.transAxes)
        shown[panel.title] = lines
    fig.suptitle(
        "streaming-exactly-once dashboard panels from a real Prometheus (rate source into Parquet; seconds since the run's start; "
        "shaded: SeoStreamStalled firing)",
        fontsize=11,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    return {"panels": shown, "stall_alert_spans_s": spans}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=150)
    p.add_argument("--hold", type=float, default=40)
    p.add_argument("--out", default="docs/img/observability-dashboard.png")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="seo-dashboard-"))
    prometheus, start, end, table = run_stream(work, args.seconds, args.hold)
    try:
        summary = draw(prometheus, start, end, Path(args.out))
    finally:
        prometheus.stop()
    print(json.dumps({"table": table, "seconds": round(end - start), **summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
