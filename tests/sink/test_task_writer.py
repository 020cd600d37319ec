"""What a writing task does in direct mode, run without Spark: the same function ``mapInArrow``
calls, fed Arrow batches the way Spark hands them (10,000 rows each)."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once.sink import arrow_file_writer
from streaming_exactly_once.sink.arrow_file_writer import HELD_TABLE_BYTES, ROW_GROUP_ROWS, FileSink, PendingRows
from streaming_exactly_once.sink.direct_writer import make_task_writer
from streaming_exactly_once.storage.local import LocalStorage

STAGING = "_seo/staging/1-a"


def batches(n_batches: int, rows: int = 10_000, *, parts: int = 1):
    for b in range(n_batches):
        ids = list(range(b * rows, (b + 1) * rows))
        yield pa.record_batch({"id": pa.array(ids, pa.int64()), "p": pa.array([f"k{i % parts}" for i in ids]), "v": pa.array([i * 0.5 for i in ids])})


def run_task(storage, fmt="parquet", partition_by=(), options=None, *, n_batches=3, parts=1):
    task = make_task_writer(storage, STAGING, fmt, partition_by, options or {})
    out = list(task(batches(n_batches, parts=parts)))
    return pa.Table.from_batches(out).to_pylist() if out else []


def intents(storage: LocalStorage, root) -> dict[str, str]:
    return {p.name: p.read_text() for p in (root / STAGING / "intents").iterdir()}


def test_a_file_gathers_its_rows_into_few_row_groups(tmp_path):
    storage = LocalStorage(str(tmp_path))
    n = ROW_GROUP_ROWS // 10_000 + 2  # one full row group, then the rest at close
    [result] = run_task(storage, n_batches=n)
    path = tmp_path / result["final"]
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 2  # not one per 10,000-row batch
    assert [meta.row_group(i).num_rows for i in range(2)] == [(ROW_GROUP_ROWS // 10_000 + 1) * 10_000, 10_000]
    ids = pq.read_table(path)["id"].to_pylist()
    assert ids == list(range(n * 10_000)) and result["rows"] == len(ids)
    assert result["size"] == path.stat().st_size
    assert intents(storage, tmp_path) == {result["final"].split("-", 2)[2].removesuffix(".c000.snappy.parquet"): result["final"]}


def test_partitioned_files_share_one_memory_bound(tmp_path, monkeypatch):
    """Many open files (one per partition directory) flush the fullest when the task's bound is
    passed, so memory stays bounded; every row still lands once."""
    monkeypatch.setattr(arrow_file_writer, "TASK_PENDING_BYTES", 200_000)
    storage = LocalStorage(str(tmp_path))
    results = run_task(storage, partition_by=("p",), n_batches=6, parts=5)
    assert sorted(r["final"].split("/")[0] for r in results) == [f"p=k{i}" for i in range(5)]
    seen = []
    for r in results:
        meta = pq.ParquetFile(tmp_path / r["final"]).metadata
        assert meta.num_row_groups > 1  # the bound made it write before the end
        seen += pq.read_table(tmp_path / r["final"])["id"].to_pylist()
    assert sorted(seen) == list(range(60_000))
    assert set(intents(storage, tmp_path).values()) == {r["final"] for r in results}


class NoFiles(LocalStorage):
    def open_write(self, path):
        import io

        return io.BytesIO()


def test_the_bound_flushes_the_fullest_files_down_to_half_and_keeps_count():
    written = []

    class Recorded(FileSink):
        def flush(self):
            written.append((self.final, self.pending_rows))
            super().flush()

    storage = NoFiles("/nonexistent-root")
    table = pa.table({"a": pa.array(range(1000), pa.int64()), "b": pa.array(range(1000), pa.int64()), "c": pa.array([0.5] * 1000)})
    held = table.nbytes + HELD_TABLE_BYTES
    bound = PendingRows(limit=3 * held)
    sinks = {name: Recorded(storage, name, "parquet", table.schema, {}, pending=bound) for name in "xyz"}
    sinks["x"].write(table)
    sinks["x"].write(table)
    sinks["y"].write(table)
    assert written == [] and bound.total == 3 * held
    sinks["z"].write(table.slice(0, 10))  # over the bound: x holds most, and writing it frees half
    assert written == [("x", 2000)] and bound.total == sinks["y"].pending_bytes + sinks["z"].pending_bytes <= bound.limit // 2
    for s in sinks.values():
        s.close()
    assert bound.total == 0 and not bound.sinks


def test_many_tiny_tables_count_what_they_hold_not_only_their_values():
    """2,000 partition directories split a 10,000-row batch into 5-row tables; each held table
    costs ~2 KB of objects beyond its few values, and the bound counts that."""
    storage = NoFiles("/nonexistent-root")
    row = pa.table({"a": pa.array([1], pa.int64())})
    bound = PendingRows(limit=1 << 20)
    sink = FileSink(storage, "f", "parquet", row.schema, {}, pending=bound)
    for _ in range(1000):  # 8 KB of values, ~2 MB held
        sink.write(row)
        assert bound.total <= bound.limit
    assert sink.fh is not None and sink.pending_rows < 1000  # the bound wrote some out
    sink.close()
    assert sink.rows == 1000 and bound.total == 0


def test_a_failing_task_does_not_wait_for_intents_of_files_it_will_never_write(tmp_path):
    class Slow(LocalStorage):
        def put_if_absent(self, path, data):
            time.sleep(0.05)
            super().put_if_absent(path, data)

    def failing():
        yield from batches(1, parts=200)
        raise RuntimeError("the task's input failed")

    task = make_task_writer(Slow(str(tmp_path)), STAGING, "parquet", ("p",), {})
    with pytest.raises(RuntimeError, match="input failed"):
        list(task(failing()))
    written = list((tmp_path / STAGING / "intents").iterdir())
    assert 0 < len(written) < 200  # the queued ones were cancelled
    assert [p for p in tmp_path.rglob("*.parquet")] == []


def test_the_file_is_created_only_once_its_intent_is_durable(tmp_path):
    events = []
    lock = threading.Lock()

    class Ordered(LocalStorage):
        def put_if_absent(self, path, data):
            time.sleep(0.2)  # a slow store: the task gathers rows meanwhile
            super().put_if_absent(path, data)
            with lock:
                events.append(("intent", data.decode()))

        def open_write(self, path):
            with lock:
                events.append(("open", path))
            return super().open_write(path)

    results = run_task(Ordered(str(tmp_path)), partition_by=("p",), n_batches=2, parts=3)
    assert len(results) == 3
    for r in results:
        assert events.index(("intent", r["final"])) < events.index(("open", r["final"]))


def test_a_failed_intent_leaves_no_file(tmp_path):
    class Failing(LocalStorage):
        def put_if_absent(self, path, data):
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        run_task(Failing(str(tmp_path)))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_table_with_another_schema_is_refused_when_it_arrives(tmp_path):
    sink = FileSink(LocalStorage(str(tmp_path)), "f.parquet", "parquet", pa.schema([("a", pa.int64())]), {})
    sink.write(pa.table({"a": pa.array([1], pa.int64())}))
    with pytest.raises(ValueError, match="f.parquet"):
        sink.write(pa.table({"a": pa.array(["x"])}))
    sink.close()
    assert pq.read_table(tmp_path / "f.parquet")["a"].to_pylist() == [1]


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_text_formats_gather_and_write_every_row_once(tmp_path, fmt):
    storage = LocalStorage(str(tmp_path))
    [result] = run_task(storage, fmt, options={"header": "true"}, n_batches=ROW_GROUP_ROWS // 10_000 + 2)
    path = tmp_path / result["final"]
    if fmt == "csv":
        ids = pacsv.read_csv(path)["id"].to_pylist()  # one header line, then the rows
    else:
        ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
    assert ids == list(range(result["rows"])) and result["rows"] == (ROW_GROUP_ROWS // 10_000 + 2) * 10_000


def test_columns_of_distinct_values_are_written_plain_like_spark_writes_them(tmp_path):
    """pyarrow would keep a dictionary for every column here (each stays under 1 MB); Spark's
    writer keeps one only where it is smaller than the values, and so does the task."""
    storage = LocalStorage(str(tmp_path))
    [result] = run_task(storage, n_batches=10)
    meta = pq.ParquetFile(tmp_path / result["final"]).metadata
    encoded = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i).has_dictionary_page for i in range(3)}
    assert encoded == {"id": False, "p": True, "v": False}
    assert pq.read_table(tmp_path / result["final"])["id"].to_pylist() == list(range(100_000))


def test_dictionary_choice_covers_nested_and_odd_columns():
    import datetime as dt

    from streaming_exactly_once.sink.arrow_file_writer import dictionary_columns

    n = 2000
    table = pa.table(
        {
            "few": pa.array([f"k{i % 3}" for i in range(n)]),
            "many": pa.array([f"value-{i}" for i in range(n)]),
            "day": pa.array([dt.date(2024, 1, 1 + i % 28) for i in range(n)]),
            "a.b": pa.array([i % 2 for i in range(n)], pa.int64()),  # a dot in a top-level name
            "none": pa.nulls(n, pa.int64()),
            "s": pa.array([{"x": i % 3} for i in range(n)]),
            "l": pa.array([[i] for i in range(n)]),
        }
    )
    chosen = dictionary_columns(table.schema, [table])
    assert chosen == ["few", "day", "a.b", "none", "s.x", "l.list.element"]
    buffer = pa.BufferOutputStream()
    pq.write_table(table, buffer, use_dictionary=chosen)
    assert pq.read_table(pa.BufferReader(buffer.getvalue())).equals(table)
    group = pq.ParquetFile(pa.BufferReader(buffer.getvalue())).metadata.row_group(0)
    dictionaries = {group.column(i).path_in_schema: group.column(i).has_dictionary_page for i in range(group.num_columns)}
    assert dictionaries == {"few": True, "many": False, "day": True, "a.b": True, "none": True, "s.x": True, "l.list.element": True}
