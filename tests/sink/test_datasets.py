"""DatasetSink: one query into many tables with real streaming queries (local[2]).

Every claim is checked by counting ids per table, with our readers and with vanilla Spark.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from streaming_exactly_once import Check, DatasetSink, ExactlyOnceSink, Output, read
from streaming_exactly_once.errors import BatchRejectedError, ConfigError
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.sink.outputs import dataset_dir_name
from streaming_exactly_once.sink.worker_moves import distribute_moves
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.identity import read_identity
from streaming_exactly_once.table.layout import STAGING_DIR, WAL_DIR, is_hidden
from streaming_exactly_once.testing.faults import FROM_ENV, GROUP_ONLY
from tests.datagen import CSV_SCHEMA, PARTITION_VALUES, write_csv_files
from tests.sink.conftest import run_driver

pytestmark = pytest.mark.spark

GROUP_BOUNDARIES = ["after-wal", "mid-move", "after-move", *GROUP_ONLY, "after-sources", "after-commit", "after-wal-delete"]


def stream(spark, input_dir, files_per_trigger=2):
    return (
        spark.readStream.schema(CSV_SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .csv(str(input_dir))
        .withColumn("k", (F.col("id") % 2).cast("int"))
    )


def run_group(spark, input_dir, root, checkpoint, *, files_per_trigger=2, **options):
    sink = DatasetSink(str(root), **{"storage_wrapper": FROM_ENV, **options})  # faults: SEO_FAIL_AT etc.
    query = sink.start(stream(spark, input_dir, files_per_trigger), checkpoint_location=str(checkpoint), trigger={"availableNow": True})
    try:
        query.awaitTermination()
        error = None
    except Exception as exc:
        error = exc
    sink.close()
    return sink, error


def expected_by_p(ids):
    out: dict[str, set[int]] = {}
    for i in ids:
        out.setdefault(PARTITION_VALUES[i % len(PARTITION_VALUES)], set()).add(i)
    return out


def ids_in(path, fmt="parquet", spark=None):
    """Ids of one table: with our pandas reader, and (if given) with vanilla Spark - must agree."""
    ours = Counter(read.pandas(str(path))["id"].tolist())
    if spark is not None:
        reader = spark.read.format(fmt)
        if fmt == "json":
            reader = reader.schema("id LONG")
        theirs = Counter(r.id for r in reader.load(str(path)).select("id").collect())
        assert ours == theirs, f"{path}: our reader and Spark disagree"
    return ours


def assert_once(counts: Counter, expected: set[int], where: str) -> None:
    dupes = [i for i, c in counts.items() if c > 1]
    assert not dupes, f"{where}: duplicated ids {dupes[:5]}"
    assert set(counts) == expected, f"{where}: missing {sorted(expected - set(counts))[:5]}, extra {sorted(set(counts) - expected)[:5]}"


def assert_group_clean(root: Path) -> None:
    storage = open_storage(str(root))
    assert storage.list_dir(WAL_DIR) == [], "WAL not empty"
    assert storage.list_dir(STAGING_DIR) == [], "staging not empty"
    for ident in root.rglob("_seo/table"):
        table = ident.parent.parent
        if table == root:
            continue
        child = open_storage(str(table))
        listed = {e.uri for e in ManifestLog(child).files()}
        on_disk = {child.uri(f.path) for f in child.walk_files() if not is_hidden(f.path)}
        assert on_disk == listed, f"{table}: orphans {sorted(on_disk - listed)[:3]}, missing {sorted(listed - on_disk)[:3]}"


def test_one_table_per_dataset_exactly_once(spark, tmp_path, capsys):
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=10)
    root = tmp_path / "lake"
    events = []
    sink, error = run_group(
        spark,
        tmp_path / "in",
        root,
        tmp_path / "ckpt",
        dataset_column="p",
        partition_by=["k"],
        watermark_columns=["id"],
        on_commit=events.append,
    )
    assert error is None
    assert sink.counters["committed"] == 3
    for value, expected in expected_by_p(ids).items():
        table = root / dataset_dir_name(value)
        assert_once(ids_in(table, spark=spark), expected, value)
        identity = read_identity(open_storage(str(table)))
        assert identity.kind == "member" and identity.group == ".." and identity.partition_by == ("k",)
        assert sink.watermarks()[dataset_dir_name(value)]["watermarks"]["id"]["high"] == max(expected)
    assert_group_clean(root)
    assert len(events) == 3 and all(len(e["tables"]) == 4 for e in events)
    # a table of the group cannot be written behind the group's back, nor the root as one table
    with pytest.raises(ConfigError, match="dataset group"):
        ExactlyOnceSink(str(root / "plain")).open()
    with pytest.raises(ConfigError, match="root of a dataset group"):
        ExactlyOnceSink(str(root)).open()
    # the CLI knows groups: status lists the tables, verify checks each, readers point at a table
    from tests.cli.test_cli import seo

    code, out, _ = seo(capsys, "status", str(root), "--json")
    info = json.loads(out)
    assert code == 0 and info["latestBatchId"] == 2 and sorted(info["tables"]) == sorted(dataset_dir_name(v) for v in PARTITION_VALUES)
    code, out, _ = seo(capsys, "verify", str(root))
    assert code == 0 and ": OK" in out
    code, _, err = seo(capsys, "files", str(root))
    assert code != 0 and "root of a dataset group" in err
    code, out, _ = seo(capsys, "recover", str(root))
    assert code == 0
    (root / "c~25d" / "_spark_metadata" / "2").unlink()  # a table's manifest loses its last batch
    code, out, _ = seo(capsys, "verify", str(root), "--json")
    problems = {p["kind"] for p in json.loads(out)["problems"]}
    assert code == 1 and "group-mismatch" in problems


def test_a_dataset_absent_from_batches_keeps_its_watermark(spark, tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    # batch 0 has datasets x and y; batches 1..3 only y
    rows = {0: [(1, "x"), (2, "y"), (3, "x")], 1: [(10, "y")], 2: [(20, "y")], 3: [(30, "y")]}
    for f, content in rows.items():
        path = inp / f"in_{f:05d}.csv"
        path.write_text("".join(f"{i},{p},{i * 1.0}\n" for i, p in content))
        os.utime(path, (1_700_000_000 + f * 10, 1_700_000_000 + f * 10))  # the file source's order
    sink, error = run_group(spark, inp, tmp_path / "lake", tmp_path / "ckpt", files_per_trigger=1, dataset_column="p", watermark_columns=["id"])
    assert error is None and sink.counters["committed"] == 4
    marks = sink.watermarks()
    assert marks["x"]["lastGroupBatch"] == 0 and marks["x"]["batchId"] == 0
    assert marks["x"]["watermarks"]["id"] == {"low": None, "high": 3, "batchMin": 1, "batchMax": 3}
    assert marks["y"]["lastGroupBatch"] == 3 and marks["y"]["batchId"] == 3
    assert marks["y"]["watermarks"]["id"]["low"] == 20 and marks["y"]["watermarks"]["id"]["high"] == 30
    # a restarted sink (new process state) reads the same state back from the newest record
    again = DatasetSink(str(tmp_path / "lake"), dataset_column="p")
    assert again.watermarks()["x"]["watermarks"]["id"]["high"] == 3
    again.close()


def test_forks_get_every_batch_in_one_commit(spark, tmp_path):
    from tests.sink.driver import fork_outputs

    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=8)
    sink, error = run_group(spark, tmp_path / "in", tmp_path / "lake", tmp_path / "ckpt", outputs=fork_outputs())
    assert error is None
    assert_once(ids_in(tmp_path / "lake" / "raw", spark=spark), set(ids), "raw")
    for value, expected in expected_by_p(ids).items():
        assert_once(ids_in(tmp_path / "lake" / "byp" / dataset_dir_name(value), "json", spark), expected, f"byp/{value}")
    doubled = read.pandas(str(tmp_path / "lake" / "byp" / "plain"))
    assert set(doubled.columns) == {"id", "v2"}  # the fork's own transform
    assert_group_clean(tmp_path / "lake")


@pytest.mark.parametrize("boundary", ["mid-move", "mid-members", "after-commit"])
def test_failure_at_group_boundaries_then_restart(spark, tmp_path, monkeypatch, boundary):
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    root, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    from tests.sink.driver import fork_outputs

    monkeypatch.setenv("SEO_FAIL_AT", f"{boundary}@2")
    _, error = run_group(spark, tmp_path / "in", root, ckpt, outputs=fork_outputs())
    assert error is not None and "injected failure" in str(error)
    monkeypatch.delenv("SEO_FAIL_AT")
    _, error = run_group(spark, tmp_path / "in", root, ckpt, outputs=fork_outputs())
    assert error is None
    assert_once(ids_in(root / "raw"), set(ids), "raw")
    for value, expected in expected_by_p(ids).items():
        assert_once(ids_in(root / "byp" / dataset_dir_name(value)), expected, value)
    assert_group_clean(root)


def visible_ids(table: Path) -> set[int]:
    """The ids a reader sees in one member table right after a kill. The members of a group
    batch are published in parallel, so a kill can leave a member with its manifest directory
    made and no batch file in it yet: a table with no batch, read as no rows and no columns."""
    if not (table / "_spark_metadata").exists():
        return set()
    frame = read.pandas(str(table))
    if len(frame.columns) == 0:
        assert len(frame) == 0 and ManifestLog(open_storage(str(table))).list_batch_ids() == [], table
        return set()
    return set(frame["id"])


@pytest.mark.long
def test_forks_all_or_nothing_under_kill_9_at_each_step(tmp_path):
    """(An in-process failure at a few boundaries is the test above; this is the real thing.)
    One process killed with SIGKILL at each commit boundary of a group batch in turn; after
    each restart every output has every batch exactly once, never one output without the other."""
    inp, root, ckpt = tmp_path / "in", tmp_path / "lake", tmp_path / "ckpt"
    ids: list[int] = []
    f = 0
    for boundary in GROUP_BOUNDARIES:
        ids += write_csv_files(inp, n_files=2, rows_per_file=6, start_file=f)
        f += 2
        out = run_driver(
            tmp_path, input=inp, table=root, checkpoint=ckpt, files_per_trigger=1, forks=True, env_extra={"SEO_CRASH_AT": f"{boundary}@1"}
        )
        assert out.returncode == -9, f"{boundary}: rc {out.returncode}\n{out.stdout[-2000:]}{out.stderr[-3000:]}"
        raw = visible_ids(root / "raw")
        byp = set()
        for value in PARTITION_VALUES:
            byp |= visible_ids(root / "byp" / dataset_dir_name(value))
        if boundary not in ("after-wal", "mid-move", "after-move", "mid-members"):
            assert raw == byp, f"{boundary}: outputs differ after the kill"
    out = run_driver(tmp_path, input=inp, table=root, checkpoint=ckpt, files_per_trigger=3, forks=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert_once(ids_in(root / "raw"), set(ids), "raw")
    for value, expected in expected_by_p(ids).items():
        assert_once(ids_in(root / "byp" / dataset_dir_name(value)), expected, value)
    assert_group_clean(root)


@pytest.mark.parametrize("kind", ["table", "group"])
def test_very_large_move_lists_run_on_the_workers(spark, tmp_path, kind):
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=10)
    root = tmp_path / "out"
    if kind == "table":
        sink = ExactlyOnceSink(str(root), partition_by=["p"], worker_moves_from=1)
    else:
        sink = DatasetSink(str(root), dataset_column="p", partition_by=["k"], worker_moves_from=1)
    distribute_moves(sink.committer, sink.storage, spark.range(1))
    real, calls = sink.committer.distribute, []

    def counting(fn, items):
        if getattr(fn, "func", fn).__name__ == "_move_on_worker":  # not the staged files' sync
            calls.append(len(items))
        real(fn, items)

    sink.committer.distribute = counting
    query = sink.start(stream(spark, tmp_path / "in"), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    query.awaitTermination()
    sink.close()
    assert len(calls) == 2 and all(calls)  # two batches, each moved by Spark tasks
    if kind == "table":
        assert_once(ids_in(root, spark=spark), set(ids), "table")
    else:
        for value, expected in expected_by_p(ids).items():
            assert_once(ids_in(root / dataset_dir_name(value)), expected, value)
        assert_group_clean(root)


def test_row_checks_quarantine_failing_rows(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=10)
    root = tmp_path / "lake"
    sink, error = run_group(
        spark,
        tmp_path / "in",
        root,
        tmp_path / "ckpt",
        dataset_column="p",
        checks=[Check.row("v < 10", name="small v"), Check.row("id % 7 <> 0", name="not a multiple of 7")],
    )
    assert error is None
    bad = {i for i in ids if not (i * 0.5 < 10) or i % 7 == 0}
    for value, expected in expected_by_p(ids).items():
        leaf = dataset_dir_name(value)
        assert_once(ids_in(root / leaf, spark=spark), expected - bad, value)
        quarantined = read.pandas(str(root / "_quarantine" / "rows" / leaf))
        assert_once(Counter(quarantined["id"].tolist()), expected & bad, f"quarantine {value}")
        both = quarantined[quarantined["id"] == 28]  # v = 14 and a multiple of 7
        if len(both):
            assert both["_seo_failed_checks"].iloc[0] == "small v; not a multiple of 7"
        checks = {c["name"]: c for c in sink.watermarks()[leaf]["checks"]}
        assert checks["small v"]["passed"] is False and "quarantined" in checks["small v"]["detail"]
    assert sink.counters["quarantined_rows"] == len(bad)


def test_values_too_long_for_a_directory_name_are_quarantined(spark, tmp_path):
    """r14: a dataset value whose directory name exceeds 255 bytes (90 CJK characters, 270
    bytes) made every retry of its batch fail with "File name too long". Such rows - and rows
    whose partition directory ``k=v`` would be too long - now go to quarantine, named and
    counted like failed row checks; the batch commits and every row lands exactly once."""
    from streaming_exactly_once.sink.group_writer import DATASET_NAME_CHECK, PARTITION_NAME_CHECK
    from streaming_exactly_once.sink.outputs import NAME_MAX_BYTES, TOO_LONG_DATASET

    long_topic, long_day = "中" * 90, "x" * 300
    assert len(dataset_dir_name(long_topic).encode()) > NAME_MAX_BYTES
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=10)
    stream_df = (
        spark.readStream.schema(CSV_SCHEMA)
        .option("maxFilesPerTrigger", 2)
        .csv(str(tmp_path / "in"))
        .withColumn(
            "topic",
            F.when(F.col("id") % 10 == 4, F.lit(long_topic)).when(F.col("id") % 10 == 1, F.lit(None)).otherwise(F.col("p")),
        )
        .withColumn("day", F.when(F.col("id") % 10 == 5, F.lit(long_day)).otherwise(F.lit("2026-11-20")))
    )
    root = tmp_path / "lake"
    sink = DatasetSink(str(root), dataset_column="topic", partition_by=["day"], checks=[Check.row("id % 7 <> 0", name="no 7")])
    query = sink.start(stream_df, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    query.awaitTermination()
    sink.close()
    assert sink.counters["committed"] == 2 and sink.counters["failed"] == 0

    long_ids = {i for i in ids if i % 10 == 4}  # 14 also fails "no 7": both reasons
    null_ids = {i for i in ids if i % 10 == 1}  # 21 too
    long_day_ids = {i for i in ids if i % 10 == 5}
    sevens = {i for i in ids if i % 7 == 0}
    seen: Counter = Counter()
    too_long = read.pandas(str(root / "_quarantine" / "rows" / TOO_LONG_DATASET))
    assert_once(Counter(too_long["id"].tolist()), long_ids, "quarantine of too long dataset values")
    seen.update(too_long["id"].tolist())
    for i, reasons in zip(too_long["id"], too_long["_seo_failed_checks"], strict=True):
        assert reasons == (f"no 7; {DATASET_NAME_CHECK}" if i % 7 == 0 else DATASET_NAME_CHECK), (i, reasons)
    assert set(too_long["topic"]) == {long_topic}  # the value itself is kept, for whoever repairs it
    nulls = read.pandas(str(root / "_quarantine" / "rows" / "__null__"))
    assert_once(Counter(nulls["id"].tolist()), null_ids, "quarantine of NULL dataset values")
    seen.update(nulls["id"].tolist())
    for i, reasons in zip(nulls["id"], nulls["_seo_failed_checks"], strict=True):
        assert reasons == ("no 7; dataset value is not null" if i % 7 == 0 else "dataset value is not null"), (i, reasons)
    # the state holds each table's checks of its last batch (ids 20..39), counted per check
    last = {i for i in ids if i >= 20}
    marks = sink.watermarks()
    named = {c["name"]: c for c in marks[TOO_LONG_DATASET]["checks"]}
    assert marks[TOO_LONG_DATASET]["status"] == "quarantined"
    assert named[DATASET_NAME_CHECK] == {
        "name": DATASET_NAME_CHECK,
        "passed": False,
        "mandatory": False,
        "detail": f"{len(long_ids & last)} row(s) quarantined",
    }

    for value, expected in expected_by_p(ids).items():
        leaf = dataset_dir_name(value)
        good = ids_in(root / leaf, spark=spark)
        assert_once(good, expected - long_ids - null_ids - long_day_ids - sevens, value)
        seen.update(good)
        set_aside = expected & ((long_day_ids | sevens) - long_ids - null_ids)
        if not set_aside:
            assert not (root / "_quarantine" / "rows" / leaf).exists()
            continue
        quarantined = read.pandas(str(root / "_quarantine" / "rows" / leaf))
        assert_once(Counter(quarantined["id"].tolist()), set_aside, f"quarantine {value}")
        seen.update(quarantined["id"].tolist())
        for i, reasons in zip(quarantined["id"], quarantined["_seo_failed_checks"], strict=True):
            assert reasons == ("no 7" if i % 7 == 0 else PARTITION_NAME_CHECK), (i, reasons)
        checks = {c["name"]: c for c in marks[leaf]["checks"]}
        n = len(expected & (long_day_ids - sevens) & last)  # a row failing "no 7" is quarantined for that
        if n:
            assert checks[PARTITION_NAME_CHECK] == {
                "name": PARTITION_NAME_CHECK,
                "passed": False,
                "mandatory": False,
                "detail": f"{n} row(s) quarantined",
            }
        else:
            assert PARTITION_NAME_CHECK not in checks  # listed only when rows failed it
    assert_once(seen, set(ids), "every table together")
    assert sink.counters["quarantined_rows"] == len(long_ids | null_ids | long_day_ids | sevens)
    assert_group_clean(root)


def test_full_policy_publishes_nothing_and_says_why(spark, tmp_path):
    write_csv_files(tmp_path / "in", n_files=2, rows_per_file=12)
    root = tmp_path / "lake"
    sink, error = run_group(
        spark,
        tmp_path / "in",
        root,
        tmp_path / "ckpt",
        dataset_column="p",
        checks=[Check.rows_between(1, 4)],
        policy="full",
    )
    assert error is not None and "BatchRejectedError" in str(error) or isinstance(error, BatchRejectedError)
    assert "rows between 1 and 4" in str(error) and "policy='partial'" in str(error)
    assert not list(root.rglob("_spark_metadata")), "a table was published"
    assert_group_clean(root)
    rejections = sink.rejections()
    assert len(rejections) == 1 and set(rejections[0]["tables"]) == {dataset_dir_name(v) for v in PARTITION_VALUES}


def test_partial_policy_quarantines_failed_tables_only(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=12)
    root = tmp_path / "lake"
    checks = [
        Check.null_fraction("v", at_most=0.0),
        Check.batch(lambda m: m["table"] != "plain", name="not plain"),  # mandatory: 'plain' is rejected
        Check.schema("id LONG, v DOUBLE, k INT"),
        Check.batch(lambda m: m["rows"] > 1000, name="big batch", mandatory=False),  # optional: recorded only
    ]
    sink, error = run_group(spark, tmp_path / "in", root, tmp_path / "ckpt", dataset_column="p", checks=checks, policy="partial")
    assert error is None
    by_p = expected_by_p(ids)
    assert not (root / "plain" / "_spark_metadata").exists()
    assert_once(ids_in(root / "_quarantine" / "batches" / "plain"), by_p["plain"], "rejected plain")
    for value in ("a b", "c%d"):
        assert_once(ids_in(root / dataset_dir_name(value), spark=spark), by_p[value], value)
    marks = sink.watermarks()
    assert marks["plain"]["status"] == "rejected" and "batchId" not in marks["plain"]
    assert marks["plain"]["rejectedRows"] == len(by_p["plain"])
    named = {c["name"]: c for c in marks["a b"]["checks"]}
    assert named["big batch"] == {**named["big batch"], "passed": False, "mandatory": False}
    assert named["schema"]["passed"] and named["null fraction of v <= 0.0"]["passed"]
    assert_group_clean(root)


def test_bad_configuration_is_refused_up_front(tmp_path):
    with pytest.raises(ConfigError, match="dataset_column"):
        DatasetSink(str(tmp_path / "a"))
    with pytest.raises(ConfigError, match="not both"):
        DatasetSink(str(tmp_path / "a"), dataset_column="p", outputs=[Output("x")])
    with pytest.raises(ConfigError, match="'_' or '.'"):
        DatasetSink(str(tmp_path / "a"), outputs=[Output("_raw")])
    with pytest.raises(ConfigError, match="nest"):
        DatasetSink(str(tmp_path / "a"), outputs=[Output("raw"), Output("raw/sub")])
    with pytest.raises(ConfigError, match="at most 255 bytes"):
        Output("raw/" + "x" * 256)
    with pytest.raises(ConfigError, match="policy"):
        DatasetSink(str(tmp_path / "a"), dataset_column="p", policy="some")
    with pytest.raises(TypeError, match="checks"):  # group options are DatasetSink's only
        ExactlyOnceSink(str(tmp_path / "b"), checks=[Check.rows_between(1, 2)])
    assert not os.path.exists(tmp_path / "a" / "_seo" / "epochs")


def test_a_batch_refused_for_its_format_leaves_no_new_table_behind(spark, tmp_path):
    """A restart with another format: the group's existing tables refuse the batch
    (``ConfigError``) before any new table of it - here a quarantine table - is created in that
    format, so the corrected restart is not refused by a table the refused batch left."""
    ids = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=10)
    root, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    checks = [Check.row("id < 20 OR id % 2 = 0", name="even from 20")]  # later odd ids: quarantine
    _, error = run_group(spark, tmp_path / "in", root, ckpt, dataset_column="p", checks=checks, format="delta")
    assert error is None
    ids += write_csv_files(tmp_path / "in", n_files=2, rows_per_file=10, start_file=2)
    # attached with foreachBatch: no start to check the tables at, the batch's commit does
    sink = DatasetSink(str(root), dataset_column="p", checks=checks, format="json", checkpoint_location=str(ckpt))
    query = stream(spark, tmp_path / "in").writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    with pytest.raises(Exception, match="but the sink was configured with format='json'"):
        query.awaitTermination()
    sink.close()
    assert not (root / "_quarantine").exists() or not list((root / "_quarantine").rglob("_seo/table"))
    _, error = run_group(spark, tmp_path / "in", root, ckpt, dataset_column="p", checks=checks, format="delta")
    assert error is None, error
    bad = {i for i in ids if i >= 20 and i % 2}
    for value, expected in expected_by_p(ids).items():
        leaf = dataset_dir_name(value)
        assert_once(ids_in(root / leaf), expected - bad, value)
        if expected & bad:  # a value with no bad row has no quarantine table
            assert_once(Counter(read.pandas(str(root / "_quarantine" / "rows" / leaf))["id"].tolist()), expected & bad, f"quarantine {value}")
