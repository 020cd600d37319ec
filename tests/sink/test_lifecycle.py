"""The sink follows its query's life in one Python process (the notebook habit).

However a query ends - ``query.stop()``, a failure in ``foreachBatch``, an ``availableNow`` run
that drains its input - the sink's hold on the table ends with it: the next query on the table,
with a new sink or the same one, starts at once.
"""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.commit.protocol.lease import read_lease_state
from streaming_exactly_once.errors import SinkInUseError
from streaming_exactly_once.storage import open_storage
from tests.datagen import write_csv_files
from tests.sink.conftest import assert_exactly_once, assert_table_clean, stream

pytestmark = pytest.mark.spark


def _wait_released(table, timeout=30.0):
    """The lease is free (released, not merely expired) within ``timeout`` - Spark's notice of
    the end arrives on its listener bus shortly after the query stops."""
    deadline = time.time() + timeout
    state = None
    while time.time() < deadline:
        state = read_lease_state(open_storage(str(table)))
        if state is not None and not state.alive and state.reason == "released":
            return state
        time.sleep(0.1)
    raise AssertionError(f"lease not released after the query ended: {state}")


def test_query_stop_then_a_new_sink_starts_at_once(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    first = ExactlyOnceSink(str(table), partition_by=["p"])
    q = first.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(ckpt), trigger={"processingTime": "50 milliseconds"})
    while first.counters["committed"] < 2:
        assert q.exception() is None
        time.sleep(0.05)
    q.stop()  # the user stops the query, not the sink
    # a new sink on the same table, right away: no ConcurrentWriterError from our own process
    second = ExactlyOnceSink(str(table), partition_by=["p"])
    q2 = second.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt), trigger={"availableNow": True})
    q2.awaitTermination()
    _wait_released(table)
    assert first._committer.lease.epoch is None and first._committer.lease._thread is None  # no heartbeat left
    assert_exactly_once(spark, table, ids)
    assert_table_clean(table)


def _stopped_while_releasing(spark, tmp_path, monkeypatch, table, ckpt) -> list[str]:
    """A query on ``table`` that committed a batch and was stopped, caught while Spark's notice of
    its end is releasing the table: the epoch given up, the "released" heartbeat not yet written
    (that write is slowed to make the window certain). Returns the input's ids."""
    from streaming_exactly_once.commit.protocol.lease import Lease

    write = Lease._write_heartbeat

    def slow_release(self, epoch, *, released=False):
        if released:
            time.sleep(1.5)
        write(self, epoch, released=released)

    monkeypatch.setattr(Lease, "_write_heartbeat", slow_release)
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    first = ExactlyOnceSink(str(table), partition_by=["p"])
    q = first.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(ckpt), trigger={"processingTime": "50 milliseconds"})
    while first.counters["committed"] < 1:
        assert q.exception() is None
        time.sleep(0.05)
    q.stop()
    deadline = time.time() + 30
    while first._committer.lease.epoch is not None:  # the release is under way, its write not done
        assert time.time() < deadline, "Spark's notice of the end never released the table"
        time.sleep(0.01)
    return ids


def test_a_new_sink_waits_for_a_release_spark_s_notice_has_under_way(spark, tmp_path, monkeypatch):
    """The release Spark's notice starts gives the epoch up before its "released" heartbeat is
    written; a new sink starting in that window waits for the write instead of finding the lease
    alive and refusing the table (seen in CI as an intermittent ConcurrentWriterError)."""
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    ids = _stopped_while_releasing(spark, tmp_path, monkeypatch, table, ckpt)
    assert read_lease_state(open_storage(str(table))).alive
    second = ExactlyOnceSink(str(table), partition_by=["p"])
    second.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt), trigger={"availableNow": True}).awaitTermination()
    _wait_released(table)
    assert_exactly_once(spark, table, ids)


def test_a_new_sink_at_a_symlinked_spelling_is_told_which_spelling_to_use(spark, tmp_path, monkeypatch):
    """After ``query.stop()``, a new sink names the table through a symbolic link while Spark's
    notice of the end is still releasing it: it waits for the release like a sink at the same
    spelling (not a ConcurrentWriterError naming this very process), and is then refused before it
    writes, told the spelling to use - batches under a second root would be missing from
    ``spark.read`` of the first. The recorded spelling then writes every row once."""
    from streaming_exactly_once.errors import IdentityError

    real, link, ckpt = tmp_path / "disk" / "t", tmp_path / "t", tmp_path / "ckpt"
    real.mkdir(parents=True)
    link.symlink_to(real)
    ids = _stopped_while_releasing(spark, tmp_path, monkeypatch, real, ckpt)
    with pytest.raises(IdentityError, match=rf"reached through a symbolic link.*as file://{real}\."):
        ExactlyOnceSink(str(link), partition_by=["p"]).start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt))
    last = ExactlyOnceSink(str(real), partition_by=["p"])
    last.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt), trigger={"availableNow": True}).awaitTermination()
    _wait_released(real)
    assert_exactly_once(spark, real, ids)


def test_the_end_watch_reads_no_progress_event_and_still_releases_the_table(spark, tmp_path, monkeypatch):
    """The listener the sink registers ignores progress events at the py4j boundary (pyspark's
    own wrapper would convert each one: about 450 py4j calls and 30 ms of CPU a batch, for every
    query of the session), and the end of the query still releases the table."""
    from streaming_exactly_once.sink import query_watch

    seen = {"progress": 0, "converted": 0}
    monkeypatch.setattr(query_watch._EndOnly, "onQueryProgress", lambda self, jevent: seen.__setitem__("progress", seen["progress"] + 1))
    monkeypatch.setattr(query_watch._QueryEndListener, "onQueryProgress", lambda self, event: seen.__setitem__("converted", seen["converted"] + 1))
    ids = write_csv_files(tmp_path / "in", n_files=3, rows_per_file=5)
    table = tmp_path / "t"
    sink = ExactlyOnceSink(str(table), partition_by=["p"])
    sink.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True}).awaitTermination()
    _wait_released(table)
    assert seen["progress"] >= 3 and seen["converted"] == 0, seen
    assert_exactly_once(spark, table, ids)


def test_the_same_sink_object_serves_one_query_after_another_never_two(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    sink = ExactlyOnceSink(str(table), partition_by=["p"])
    q = sink.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(ckpt), trigger={"processingTime": "100 milliseconds"})
    with pytest.raises(SinkInUseError):
        sink.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(tmp_path / "other"))
    while sink.counters["committed"] < 1:
        time.sleep(0.05)
    q.stop()
    more = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=5, start_file=4)
    sink.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt), trigger={"availableNow": True}).awaitTermination()
    _wait_released(table)
    assert_exactly_once(spark, table, ids + more)


def test_a_late_end_notice_of_the_last_query_cannot_free_the_lease_a_restart_takes(spark, tmp_path):
    """CI found this race: ``q.stop()``, then ``sink.start(...)`` on the same sink object while
    Spark's notice of the old query's end was still on its way. The notice released the lease in
    the middle of the new start's recovery ("recovery needs the epoch of the lease it runs
    under"). Here the notice is delivered, from another thread, exactly in that window."""
    ids = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    sink = ExactlyOnceSink(str(table), partition_by=["p"])
    q = sink.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(ckpt), trigger={"availableNow": True})
    q.awaitTermination()
    old = str(q.runId)
    sink._active_query, sink._active_run = str(q.id), old  # Spark's notice of the end has not arrived yet (it may have: put it back)
    committer = sink.committer
    committer.invalidate()  # as when the stop interrupted a batch: the start recovers the table
    recover = committer._recover
    late: list[threading.Thread] = []

    def recover_with_a_late_notice():
        if not late:
            late.append(threading.Thread(target=sink._query_ended, args=(old,)))
            late[0].start()
            late[0].join(0.5)  # the notice gets its chance to run inside the recovery
        return recover()

    committer._recover = recover_with_a_late_notice
    more = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=5, start_file=2)
    q2 = sink.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt), trigger={"availableNow": True})
    q2.awaitTermination()  # under the race, the start above failed: the recovery had lost its lease
    late[0].join(30)
    assert not late[0].is_alive()
    _wait_released(table)
    assert_exactly_once(spark, table, ids + more)


def test_foreach_batch_with_a_given_query_id_releases_the_table_when_its_query_ends(spark, tmp_path):
    """``writeStream.foreachBatch(sink)`` with ``query_id=``: Spark runs the query under its own
    id, not the given one. The sink watches that id, so the table is released as each run ends -
    ``seo recover`` (another writer) gets it at once, and the same sink serves the next run."""
    from tests.commit.helpers import make_committer

    ids = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=5)
    table, ckpt = tmp_path / "t", str(tmp_path / "ckpt")
    sink = ExactlyOnceSink(str(table), partition_by=["p"], query_id="orders-v1", checkpoint_location=ckpt)
    for run in range(2):
        q = stream(spark, tmp_path / "in", 1).writeStream.foreachBatch(sink).option("checkpointLocation", ckpt)
        q.trigger(availableNow=True).start().awaitTermination()
        _wait_released(table)
        other = make_committer(open_storage(str(table)), partition_by=("p",))
        other.open()  # before the fix: ConcurrentWriterError, the heartbeat of a query that had ended
        other.close()
        if run == 0:
            ids += write_csv_files(tmp_path / "in", n_files=2, rows_per_file=5, start_file=2)
    assert sink.counters["committed"] == 4
    assert_exactly_once(spark, table, ids)


@pytest.mark.parametrize("attach", ["start", "foreachBatch"])
def test_a_sink_given_a_query_id_writes_a_new_checkpoint_s_batches(spark, tmp_path, attach):
    """The same sink object, given ``query_id=``, on a new checkpoint (Spark's batch ids start
    at 0 again): its batches are new, written - not skipped as replays of the first checkpoint's.
    ``foreachBatch``: the sink was told no checkpoint location, and finds the query's own."""
    table, ck1, ck2 = tmp_path / "t", str(tmp_path / "ck1"), str(tmp_path / "ck2")
    ids = write_csv_files(tmp_path / "in1", n_files=2, rows_per_file=5)
    sink = ExactlyOnceSink(str(table), partition_by=["p"], query_id="orders-v1")

    def run(source, checkpoint):
        df = stream(spark, source, 1)
        if attach == "start":
            sink.start(df, checkpoint_location=checkpoint, trigger={"availableNow": True}).awaitTermination()
        else:
            df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).trigger(availableNow=True).start().awaitTermination()
        _wait_released(table)

    run(tmp_path / "in1", ck1)
    ids += write_csv_files(tmp_path / "in2", n_files=3, rows_per_file=5, start_file=2)
    run(tmp_path / "in2", ck2)  # before: batches 0 and 1 of ck2 skipped as "duplicates", 10 rows lost
    assert sink.counters["committed"] == 5
    assert_exactly_once(spark, table, ids)


def test_a_sink_told_another_query_s_checkpoint_refuses_the_batch(spark, tmp_path):
    """``checkpoint_location=`` names the checkpoint of an earlier query, the query runs on
    another one: with a given ``query_id`` too, the batch is refused (``ConfigError``), nothing
    written, instead of being read against the wrong checkpoint."""
    table, ck1, ck2 = tmp_path / "t", str(tmp_path / "ck1"), str(tmp_path / "ck2")
    ids = write_csv_files(tmp_path / "in", n_files=1, rows_per_file=5)
    sink = ExactlyOnceSink(str(table), partition_by=["p"], query_id="orders-v1", checkpoint_location=ck1)
    sink.start(stream(spark, tmp_path / "in", 1), checkpoint_location=ck1, trigger={"availableNow": True}).awaitTermination()
    stale = ExactlyOnceSink(str(table), partition_by=["p"], query_id="orders-v1", checkpoint_location=ck1)
    write_csv_files(tmp_path / "in", n_files=1, rows_per_file=5, start_file=1)
    query = stream(spark, tmp_path / "in", 1).writeStream.foreachBatch(stale).option("checkpointLocation", ck2).trigger(availableNow=True).start()
    with pytest.raises(StreamingQueryException, match="belongs to query"):
        query.awaitTermination()
    stale.close()
    assert_exactly_once(spark, table, ids)


def test_a_query_failing_in_foreach_batch_releases_the_table(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=3, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    # rows that fail when the batch is written: every batch fails in foreachBatch (a column the
    # rows lack, as this test once used, now fails at start())
    bad = ExactlyOnceSink(str(table), partition_by=["p"])
    failing = stream(spark, tmp_path / "in", 1).withColumn("v", F.when(F.col("id") >= 0, F.raise_error(F.lit("bad row"))).otherwise(F.col("v")))
    q = bad.start(failing, checkpoint_location=str(ckpt), trigger={"availableNow": True})
    with pytest.raises(StreamingQueryException):
        q.awaitTermination()
    _wait_released(table)
    good = ExactlyOnceSink(str(table), partition_by=["p"])
    good.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt), trigger={"availableNow": True}).awaitTermination()
    assert_exactly_once(spark, table, ids)


def test_checkpoint_deleted_and_query_restarted_in_the_same_session(spark, tmp_path):
    first = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    ExactlyOnceSink(str(table), partition_by=["p"]).start(
        stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt), trigger={"availableNow": True}
    ).awaitTermination()
    shutil.rmtree(ckpt)  # lost: the file source re-reads every file under a new query id
    second = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=5, start_file=4)
    sink = ExactlyOnceSink(str(table), partition_by=["p"])
    sink.start(stream(spark, tmp_path / "in", 3), checkpoint_location=str(ckpt), trigger={"availableNow": True}).awaitTermination()
    _wait_released(table)
    assert sink.counters["skipped_rows"] == len(first)
    assert_exactly_once(spark, table, first + second)
    assert_table_clean(table)


SESSION_STOP_SCRIPT = """
import sys, time
from pyspark.sql import SparkSession
from streaming_exactly_once import ExactlyOnceSink
from tests.datagen import CSV_SCHEMA
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
sink = ExactlyOnceSink(sys.argv[2], partition_by=["p"], lease_timeout="3s")
df = spark.readStream.schema(CSV_SCHEMA).option("maxFilesPerTrigger", 1).csv(sys.argv[1])
q = sink.start(df, checkpoint_location=sys.argv[3], trigger={"processingTime": "100 milliseconds"})
while sink.counters["committed"] < 1:
    time.sleep(0.05)
spark.stop()  # ends the query without telling any listener
print("STOPPED", flush=True)
time.sleep(60)  # the process lives on, as a notebook kernel does
"""


def test_stopping_the_session_releases_the_table(tmp_path):
    import os
    import subprocess
    import sys

    from tests.sink.conftest import REPO

    write_csv_files(tmp_path / "in", n_files=3, rows_per_file=5)
    table = tmp_path / "t"
    proc = subprocess.Popen(
        [sys.executable, "-c", SESSION_STOP_SCRIPT, str(tmp_path / "in"), str(table), str(tmp_path / "ckpt")],
        cwd=REPO,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for line in proc.stdout:
            if line.startswith("STOPPED"):
                break
        else:
            raise AssertionError("the script ended before stopping its session")
        state = _wait_released(table, timeout=10)  # one heartbeat interval (1 s) after spark.stop()
        assert proc.poll() is None and state.writer.pid == proc.pid  # released by the live process itself
    finally:
        proc.kill()


def test_batch_figures_reach_a_streaming_query_listener(spark, tmp_path):
    from streaming_exactly_once import SinkProgressListener

    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    table = tmp_path / "t"
    sink = ExactlyOnceSink(str(table), partition_by=["p"], watermark_columns=["id"])
    seen = []
    listener = SinkProgressListener(sink, seen.append)
    spark.streams.addListener(listener)
    try:
        q = sink.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
        q.awaitTermination()
        deadline = time.time() + 20
        while time.time() < deadline and len([m for m in seen if m["status"] == "committed"]) < 2:
            time.sleep(0.1)
    finally:
        spark.streams.removeListener(listener)
    committed = [m for m in seen if m["status"] == "committed"]
    assert [m["sparkBatchId"] for m in committed] == [0, 1], seen
    assert sum(m["numRows"] for m in committed) == len(ids)
    for m in committed:
        assert m["numFiles"] >= 1 and m["numBytes"] > 0 and m["commitMs"] >= 0 and "manifest" in m["stepMs"]
        # the same rows, counted by Spark in the query's own progress (observedMetrics)
        assert m["observed"]["rows"] == m["numRows"]
        assert m["observed"]["max:id"] == m["watermarks"]["id"]["max"]


def test_a_late_end_notice_of_the_previous_run_leaves_the_restarted_runs_lease_alone(spark, tmp_path):
    """The notebook habit: ``q.stop()``, then the same sink starts the query again on the same
    checkpoint - the same query id, a new run id. Spark tells listeners that the old run ended on
    its listener bus, late when a listener ahead of the sink's is slow (here a user's, 4 s). That
    notice is about the old run: the restarted run must keep its lease, a second writer must be
    refused meanwhile, and the run must go on committing."""
    from pyspark.sql.streaming import StreamingQueryListener

    from streaming_exactly_once.errors import ConcurrentWriterError
    from tests.commit.helpers import make_committer

    class SlowListener(StreamingQueryListener):  # e.g. metrics posted somewhere slow
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            pass

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            time.sleep(4)

    session = spark.newSession()  # its own bus: the slow listener is ahead of the sink's
    listener = SlowListener()
    session.streams.addListener(listener)
    table, ckpt, inp = tmp_path / "t", str(tmp_path / "ckpt"), tmp_path / "in"
    ids = write_csv_files(inp, n_files=2, rows_per_file=5)
    sink = ExactlyOnceSink(str(table), partition_by=["p"])
    q2 = None
    try:
        q = sink.start(stream(session, inp, 1), checkpoint_location=ckpt, trigger={"processingTime": "200 milliseconds"})
        while sink.counters["committed"] < 2:
            assert q.exception() is None
            time.sleep(0.05)
        q.stop()
        q2 = sink.start(stream(session, inp, 1), checkpoint_location=ckpt, trigger={"processingTime": "300 milliseconds"})
        assert str(q2.id) == str(q.id) and str(q2.runId) != str(q.runId)
        deadline = time.time() + 7  # the old run's notice arrives about 4 s after its end
        while time.time() < deadline:
            state = read_lease_state(open_storage(str(table)))
            assert q2.isActive, q2.exception()
            assert state is not None and state.alive, f"the previous run's late end notice released the restarted run's lease: {state}"
            time.sleep(0.1)
        with pytest.raises(ConcurrentWriterError):
            make_committer(open_storage(str(table)), partition_by=("p",)).open()
        ids += write_csv_files(inp, n_files=2, rows_per_file=5, start_file=2)
        deadline = time.time() + 60
        while sink.counters["committed"] < 4 and time.time() < deadline:
            assert q2.exception() is None, q2.exception()
            time.sleep(0.1)
        assert q2.exception() is None and q2.isActive
        q2.stop()
        assert_exactly_once(spark, table, ids)
    finally:
        if q2 is not None and q2.isActive:
            q2.stop()
        session.streams.removeListener(listener)
