"""What the metrics and lineage hooks cost a batch (part of the commit benchmark).

Real commits (rename mode, staged files, as ``bench_commit.overhead``), each wrapped in the hooks a
sink calls - ``batch_started``, ``batch_sources``, ``batch_done`` of a ``SinkObserver`` - and only
the hooks' own time measured, per batch, in three set-ups: metrics (the Prometheus endpoint
served, an OpenTelemetry SDK provider reading every instrument), lineage (file transport, no
throttle: every batch builds its facts and is handed to the sender thread, which emits while the
next batches commit), and both. A scrape of the endpoint every 100 batches and the SDK's
collection at the end check that what was recorded is what is exported; the series count after
the first 100 batches and at the end shows that nothing grows with batches.

    python -m benchmarks.bench_observability [--batches 2000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from .bench_commit import QUERY, _committer, _stage
from .stats import summary

TARGET_MS = 0.3


def _series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("seo_"))


def run(setup: str, *, batches: int, files_per_batch: int, work: Path) -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import StagedFile
    from streaming_exactly_once.observability.observer import SinkObserver
    from streaming_exactly_once.observability.otel_export import OtelExport
    from streaming_exactly_once.observability.settings import lineage_settings, metrics_settings

    root = work / setup
    c = _committer(str(root))
    metrics = metrics_settings("127.0.0.1:0") if setup in ("metrics", "both") else None
    lineage = None
    if setup in ("lineage", "both"):
        lineage = lineage_settings({"transport": {"type": "file", "log_file_path": str(work / f"{setup}.jsonl"), "append": True}})
    observer = SinkObserver(c.storage.root_uri, metrics=metrics, lineage=lineage)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel = OtelExport(provider) if metrics is not None else None
    payload = b"x" * 4096
    hooks, commits, series = [], [], []
    ends = ['{"events":{"0":%d,"1":%d}}']
    for b in range(batches):
        t0 = time.perf_counter()
        observer.batch_started()
        observer.batch_sources(None, [ends[0] % (b * 10, b * 7)], [InputFile(0, f"file:///landing/day=1/f-{b}.csv", 1)])
        hook = time.perf_counter() - t0
        attempt = c.begin(QUERY, b, mode="rename")
        files = [
            StagedFile(final=final, size=len(payload), mtime_ms=int(time.time() * 1000), staged=staged)
            for staged, final in _stage(root, attempt.staging_dir, b, files_per_batch, payload)
        ]
        t1 = time.perf_counter()
        result = c.commit(attempt, files, num_rows=1000)
        t2 = time.perf_counter()
        observer.batch_done(result, lease=c.lease)
        hooks.append((hook + time.perf_counter() - t2) * 1000)
        commits.append((t2 - t1) * 1000)
        if observer.endpoint is not None and b % 100 == 99:
            series.append(_series(urllib.request.urlopen(observer.endpoint, timeout=10).read().decode()))
    exported: dict[str, Any] = {}
    if otel is not None:
        points = {m.name: m.data.data_points for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
        exported = {
            "otel_batches": sum(p.value for p in points["seo_batches"]),
            "otel_commit_histogram_count": sum(p.count for p in points["seo_commit_duration_seconds"]),
        }
        otel.close()
    provider.shutdown()
    observer.close()
    c.close()
    events = len((work / f"{setup}.jsonl").read_text().splitlines()) if lineage is not None else 0
    return {
        "setup": setup,
        "batches": batches,
        "hooks_ms": summary(hooks),
        "commit_ms": summary(commits),
        "hooks_share_of_commit_median": summary(hooks)["median"] / summary(commits)["median"],
        "prometheus_series_after_100_and_at_end": [series[0], series[-1]] if series else [],
        "lineage_events": events,
        **exported,
    }


def main(batches: int = 1000, files_per_batch: int = 10) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="seo-bench-observability-"))
    out: dict[str, Any] = {"target_ms": TARGET_MS}
    for setup in ("metrics", "lineage", "both"):
        r = out[setup] = run(setup, batches=batches, files_per_batch=files_per_batch, work=work)
        h = r["hooks_ms"]
        print(
            f"  observability hooks ({setup}): median {h['median'] * 1000:.0f} us, p99 {h['p99'] * 1000:.0f} us per batch "
            f"(commit median {r['commit_ms']['median']:.2f} ms)",
            flush=True,
        )
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batches", type=int, default=1000)
    p.add_argument("--out", default="benchmarks/results/observability.json")
    args = p.parse_args()
    result = main(args.batches)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
