"""The explorer's query in a driver process of its own, so that it can be killed for real.

    python -m tests.explorer.driver SPEC.json
    python -m tests.explorer.driver --wait      (a spare: ``lifecycle.prewarm``)

``SPEC.json`` is a ``tests.explorer.query.RunSpec``: the same query the explorer runs in its own
process. Faults come from the environment (``SEO_CRASH_AT``, ``SEO_FAIL_AT``, ``SEO_PAUSE_AT``:
the sink's ``storage_wrapper``, ``streaming_exactly_once.testing.faults``). Prints ``STARTED``
once the query runs, then ``DONE``, or ``REFUSED <outcome>``. Exit codes: 0 input consumed, 3
``ConcurrentWriterError``, 4 ``WriterFencedError``, 5 any other refusal.

With ``connect`` in the spec the driver is a Spark Connect client of a local server it starts
(``remote("local[1]")``): the sink runs in the server's ``foreachBatch`` worker, which inherits
this environment and kills itself at a crash boundary; the driver then kills its whole process
group (client, server, worker), as a crashed machine would.

With ``--wait`` the driver starts its SparkSession first (the JVM start is most of a driver's
cost), prints ``READY``, and then reads one line from stdin: ``{"spec": PATH, "env": {...}}``.
The environment (the fault to inject) is set before the sink is built, so the run is the one a
fresh ``driver SPEC.json`` with that environment would make. Never for Spark Connect specs.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def session(connect: bool):  # -> SparkSession
    from pyspark.sql import SparkSession

    if connect:
        os.environ["SPARK_TESTING"] = "1"  # pyspark binds the local Connect server to a free port
        builder = SparkSession.builder.remote("local[1]").config("spark.connect.grpc.binding.address", "127.0.0.1")
    else:
        builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    spark = builder.config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC").getOrCreate()
    if not connect:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _warm(spark) -> None:  # noqa: ANN001 - a SparkSession
    """What every run of a spare needs before its spec comes, done while it waits: the library's
    sink modules imported and the Kafka stand-in registered (its Python worker started) - some
    seconds each that a kill's driver no longer spends after it got its spec."""
    import streaming_exactly_once.sink  # noqa: F401
    from streaming_exactly_once.testing.fake_kafka import FakeKafka

    spark.dataSource.register(FakeKafka)
    spark._seo_fake_kafka = True  # query._kafka: registered once per session


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    repo = str(Path(__file__).resolve().parents[2])  # Spark's Python workers import this checkout
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (repo, os.environ.get("PYTHONPATH")) if x)
    from tests.explorer.outcome import classify
    from tests.explorer.query import RunSpec, build_sink, start_query, stop, stop_when_drained

    spark = None
    if args[0] == "--wait":
        import json

        spark = session(False)
        _warm(spark)
        print("READY", flush=True)
        order = json.loads(sys.stdin.readline())
        os.environ.update(order["env"])
        args = [order["spec"]]
    spec = RunSpec.loads(Path(args[0]).read_text())
    try:
        sink = build_sink(spec)
        if not spec.connect:
            sink.open()  # the lease first: a second writer fails before Spark starts
        query = start_query(spark or session(spec.connect), sink, spec)
        print("STARTED", flush=True)
        if spec.endless:
            stop_when_drained(query, spec, 600)
            stop(sink, query, spec)
        else:
            query.awaitTermination()
        error = query.exception()
        if error is not None:
            raise error
    except Exception as exc:
        if spec.connect and os.environ.get("SEO_CRASH_AT") and "Python worker exited unexpectedly" in str(exc):
            print("WORKER-KILLED", flush=True)  # it killed itself at its boundary: the machine goes with it
            os.killpg(0, signal.SIGKILL)
        outcome = classify(exc)
        print(f"REFUSED {outcome}", flush=True)
        return {"ConcurrentWriterError": 3, "WriterFencedError": 4}.get(outcome, 5)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
