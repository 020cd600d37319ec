"""The explorer's query in a driver process of its own, so that it can be killed for real.

    python -m tests.explorer.driver SPEC.json

``SPEC.json`` is a ``tests.explorer.query.RunSpec``: the same query the explorer runs in its own
process. Faults come from the environment (``SEO_CRASH_AT``, ``SEO_PAUSE_AT``: the sink's
``storage_wrapper``, ``streaming_exactly_once.testing.faults``). Prints ``STARTED <epoch>`` once
the query runs, then ``DONE``, or ``REFUSED <outcome>``. Exit codes: 0 input consumed, 3
``ConcurrentWriterError``, 4 ``WriterFencedError``, 5 any other refusal.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    repo = str(Path(__file__).resolve().parents[2])  # the Kafka stand-in runs in Python workers
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (repo, os.environ.get("PYTHONPATH")) if x)
    from tests.explorer.outcome import classify
    from tests.explorer.query import RunSpec, build_sink, start_query, stop, stop_when_drained

    spec = RunSpec.loads(Path(args[0]).read_text())
    try:
        sink = build_sink(spec)
        sink.open()  # the lease first: a second writer fails before Spark starts
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        query = start_query(spark, sink, spec)
        print(f"STARTED {sink.committer.epoch}", flush=True)
        if spec.endless:
            stop_when_drained(query, spec, 600)
            stop(sink, query, spec)
        else:
            query.awaitTermination()
        error = query.exception()
        if error is not None:
            raise error
    except Exception as exc:
        outcome = classify(exc)
        print(f"REFUSED {outcome}", flush=True)
        return {"ConcurrentWriterError": 3, "WriterFencedError": 4}.get(outcome, 5)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
