"""What a batch's files and schema bring to an Iceberg table, through the commit layer without
Spark: INT96 timestamps (refused before the WAL claim; a batch an earlier release published with
them is committed by ``seo recover --accept-int96``), columns the table requires and a batch may
leave null, NOT NULL partition columns. Read back with pyiceberg alone, by path."""

from __future__ import annotations

import datetime
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.errors import IcebergTableError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import stage_file
from tests.commit.power_cut_runs import seo
from tests.iceberg.table_helpers import Q, iceberg_committer, pyiceberg_ids

UTC = datetime.timezone.utc
#: timestamps nanoseconds cannot hold: INT96 read as nanoseconds (pyiceberg) wraps them around
FAR = [datetime.datetime(1500, 3, 1, tzinfo=UTC), datetime.datetime(9999, 12, 31, 23, 59, tzinfo=UTC)]
TS_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


def ts_parquet(ids: list[int], *, int96: bool) -> bytes:
    """A data file as Spark writes it with ``outputTimestampType`` INT96 (its default) or MICROS."""
    ts = pa.array([FAR[i % 2] for i in ids], pa.timestamp("us", tz="UTC"))
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "ts": ts}), buf, use_deprecated_int96_timestamps=int96)
    return buf.getvalue()


def commit_ts(committer, batch: int, ids: list[int], *, int96: bool):
    """One batch of one file, staged as Spark stages it (rename mode)."""
    committer.ensure_open()
    with committer.batch(Q, batch, mode="rename") as attempt:
        staged = stage_file(committer.storage, attempt, f"p=a/part-00000-{attempt.attempt}.parquet", ts_parquet(ids, int96=int96), spark_staging=True)
        inputs = [InputFile(source=0, path=f"file:///in/{batch}.csv", timestamp=1)]
        return committer.commit(attempt, [staged], input_files=inputs, num_rows=len(ids), schema=TS_SCHEMA)


def iceberg_rows(table) -> dict[int, datetime.datetime]:
    from pyiceberg.table import StaticTable

    rows = StaticTable.from_metadata(str(table)).scan(selected_fields=("id", "ts")).to_arrow().to_pylist()
    return {r["id"]: r["ts"] for r in rows}


@pytest.mark.parametrize("delta", [False, True], ids=["iceberg", "delta+iceberg"])
def test_int96_files_are_refused_before_the_claim_and_nothing_is_published(tmp_path, delta):
    """A Spark that ignores the sink's writer option wrote INT96: refused while nothing is
    written - no claim, no manifest entry, no Delta or Iceberg commit - with the setting that
    helps; Spark's retry with that setting commits the batch."""
    table = tmp_path / "t"
    committer = iceberg_committer(open_storage(str(table)), delta=delta)
    with pytest.raises(IcebergTableError, match=r"INT96 .*Nothing was published: set it in the query's session .*outputTimestampType"):
        commit_ts(committer, 0, [0, 1], int96=True)
    assert not (table / "_seo" / "wal" / "0").exists()
    assert not (table / "_spark_metadata" / "0").exists()
    assert not (table / "metadata").exists() and not (table / "_delta_log").exists()
    assert list((table / "_seo" / "staging").iterdir()) == []  # the attempt's files are gone
    assert commit_ts(committer, 0, [0, 1], int96=False).status == "committed"
    committer.close()
    assert iceberg_rows(table) == {0: FAR[0], 1: FAR[1]}


def test_a_batch_published_with_int96_files_is_committed_by_seo_recover_accept_int96(tmp_path, monkeypatch):
    """An earlier release checked INT96 only in the Iceberg step, after the manifest: batch 1 is
    published there and its Iceberg commit refused for good. The refusal names the way out, and
    it works: the batch's files go into the Iceberg table as they are, and the stream goes on."""
    from streaming_exactly_once.commit import table_plan

    table = tmp_path / "t"
    committer = iceberg_committer(open_storage(str(table)))
    commit_ts(committer, 0, [0, 1], int96=False)
    with monkeypatch.context() as m:  # the earlier release: no footer check before the claim
        m.setattr(table_plan, "staged_rows", lambda storage, path, table: None)
        with pytest.raises(IcebergTableError, match="published in the table's manifest already"):
            commit_ts(committer, 1, [10, 11], int96=True)
    committer.close()
    assert (table / "_spark_metadata" / "1").exists() and (table / "_seo" / "wal" / "1").exists()
    code, out = seo("recover", str(table))
    assert code != 0 and "seo recover <table> --accept-int96" in out
    with pytest.raises(IcebergTableError, match="--accept-int96"):  # a restarted query is refused the same way
        iceberg_committer(open_storage(str(table))).open()
    code, out = seo("recover", "--accept-int96", str(table))
    assert code == 0, out
    assert not (table / "_seo" / "wal" / "1").exists()
    assert set(iceberg_rows(table)) == {0, 1, 10, 11}  # pyiceberg reads INT96 as nanoseconds: only the ids
    committer = iceberg_committer(open_storage(str(table)))
    assert commit_ts(committer, 2, [20, 21], int96=False).status == "committed"
    committer.close()
    assert pyiceberg_ids(table) == {i: 1 for i in (0, 1, 10, 11, 20, 21)}
    assert verify_table(open_storage(str(table))).problems == []


def spark_schema(*fields: tuple[str, object, bool]) -> str:
    return json.dumps({"type": "struct", "fields": [{"name": n, "type": t, "nullable": null, "metadata": {}} for n, t, null in fields]})


NESTED = [
    ("s", {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": False, "metadata": {}}]}),
    ("a", {"type": "array", "elementType": "long", "containsNull": False}),
    ("m", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": False}),
]


def nested_schema(*, nullable: bool) -> str:
    """``id``, a struct, an array and a map - NOT NULL all the way down, or nullable all the way."""
    inner = json.loads(json.dumps(NESTED))
    if nullable:
        inner[0][1]["fields"][0]["nullable"] = True
        inner[1][1]["containsNull"] = True
        inner[2][1]["valueContainsNull"] = True
    return spark_schema(("id", "long", nullable), *[(n, t, nullable) for n, t in inner], ("p", "string", False))


def nested_parquet(ids: list[int], *, nulls: bool) -> bytes:
    """Rows of ``nested_schema``; with ``nulls`` the last row holds a null at every level."""
    n = len(ids)
    none = (lambda v: None) if nulls else (lambda v: v)
    table = pa.table(
        {
            "id": pa.array(ids[:-1] + [none(ids[-1])], pa.int64()),
            "s": pa.array([{"x": i} for i in ids[:-1]] + [{"x": none(ids[-1])}], pa.struct([("x", pa.int64())])),
            "a": pa.array([[i] for i in ids[:-1]] + [[none(ids[-1])]], pa.list_(pa.int64())),
            "m": pa.array([[("k", i)] for i in ids[:-1]] + [[("k", none(ids[-1]))]], pa.map_(pa.string(), pa.int64())),
        }
    )
    assert table.num_rows == n
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def commit_files(committer, batch: int, data: bytes, rows: int, schema: str, *, partition: str = "p=a"):
    committer.ensure_open()
    with committer.batch(Q, batch, mode="rename") as attempt:
        staged = stage_file(committer.storage, attempt, f"{partition}/part-00000-{attempt.attempt}.parquet", data, spark_staging=True)
        inputs = [InputFile(source=0, path=f"file:///in/{batch}.csv", timestamp=1)]
        return committer.commit(attempt, [staged], input_files=inputs, num_rows=rows, schema=schema)


def metadata_versions(table) -> list[dict]:
    meta = table / "metadata"
    return [json.loads((meta / f"v{v}.metadata.json").read_text()) for v in range(1, len(list(meta.glob("v*.metadata.json"))) + 1)]


def required_paths(metadata: dict) -> set[str]:
    """Every required field, list element and map value of the current schema, by path."""
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
    out: set[str] = set()

    def walk(path: str, t: object) -> None:
        if not isinstance(t, dict):
            return
        if t["type"] == "struct":
            for f in t["fields"]:
                if f["required"]:
                    out.add(f"{path}{f['name']}")
                walk(f"{path}{f['name']}.", f["type"])
        elif t["type"] == "list":
            if t["element-required"]:
                out.add(f"{path}element")
            walk(f"{path}element.", t["element"])
        elif t["type"] == "map":
            if t["value-required"]:
                out.add(f"{path}value")
            walk(f"{path}value.", t["value"])

    walk("", schema)
    return out


@pytest.mark.parametrize("fmt", ["iceberg", "delta+iceberg", "delta"])
def test_a_nullable_batch_after_a_not_null_one_makes_the_format_columns_optional_in_its_own_commit(tmp_path, fmt):
    """Nullability is never a reason to refuse (docs/schema.md): what the table requires and the
    batch may leave null - a column, a struct's field, list elements, map values - becomes
    optional in the metadata version of the batch's snapshot (Delta: nullable, in the ``metaData``
    of the batch's version), and pyiceberg and delta-rs read the nulls."""
    from deltalake import DeltaTable
    from pyiceberg.table import StaticTable

    from tests.delta.helpers import delta_committer

    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = delta_committer(storage) if fmt == "delta" else iceberg_committer(storage, delta=fmt == "delta+iceberg")
    assert commit_files(committer, 0, nested_parquet([0, 1], nulls=False), 2, nested_schema(nullable=False)).status == "committed"
    if fmt != "delta":
        first = metadata_versions(table)[-1]
        assert required_paths(first) == {"id", "s", "s.x", "a", "a.element", "m", "m.value"}  # the partition column is optional
    assert commit_files(committer, 1, nested_parquet([10, 11], nulls=True), 2, nested_schema(nullable=True)).status == "committed"
    committer.close()
    expected = [
        {"id": 0, "s": {"x": 0}, "a": [0], "m": [("k", 0)], "p": "a"},
        {"id": 1, "s": {"x": 1}, "a": [1], "m": [("k", 1)], "p": "a"},
        {"id": 10, "s": {"x": 10}, "a": [10], "m": [("k", 10)], "p": "a"},
        {"id": None, "s": {"x": None}, "a": [None], "m": [("k", None)], "p": "a"},
    ]
    order = lambda r: (r["id"] is None, r["id"] or 0)  # noqa: E731
    if fmt != "delta":
        versions = metadata_versions(table)
        assert len(versions) == 2 and required_paths(versions[1]) == set()  # one metadata version: the snapshot and its schema
        assert versions[1]["properties"]["schema.name-mapping.default"] == first["properties"]["schema.name-mapping.default"]
        assert sorted(StaticTable.from_metadata(str(table)).scan().to_arrow().to_pylist(), key=order) == expected
    if fmt != "iceberg":
        log = [json.loads(line) for line in (table / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]
        (metadata,) = [a["metaData"] for a in log if "metaData" in a]
        assert json.loads(metadata["schemaString"]) == json.loads(nested_schema(nullable=True)) | {"type": "struct"}
        rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
        assert sorted(rows, key=order) == expected
    assert verify_table(open_storage(str(table))).problems == []


def test_a_table_an_earlier_release_made_with_a_required_partition_column_is_readable_from_its_next_batch(tmp_path, monkeypatch):
    """An earlier release created partition columns declared NOT NULL as required; Spark's files
    do not hold them, and pyiceberg refused to read the table at all. The next batch's commit
    makes the column optional; the snapshots before it keep their schema."""
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.table import StaticTable

    from streaming_exactly_once.iceberg import schema as iceberg_schema_module

    table = tmp_path / "t"
    schema = spark_schema(("id", "long", True), ("p", "string", False))
    committer = iceberg_committer(open_storage(str(table)))
    real = iceberg_schema_module.iceberg_schema
    with monkeypatch.context() as m:  # the earlier release: partition columns as Spark declares them
        m.setattr(iceberg_schema_module, "iceberg_schema", lambda schema_json, *, table, optional=(): real(schema_json, table=table))
        commit_files(committer, 0, pq_ids([0, 1]), 2, schema)
    assert required_paths(metadata_versions(table)[-1]) == {"p"}
    with pytest.raises(ResolveError, match="required"):
        StaticTable.from_metadata(str(table)).scan().to_arrow()
    committer.close()
    assert [p.kind for p in verify_table(open_storage(str(table))).problems] == ["iceberg-required-partition"]
    committer = iceberg_committer(open_storage(str(table)))
    commit_files(committer, 1, pq_ids([10, 11]), 2, schema)
    committer.close()
    assert required_paths(metadata_versions(table)[-1]) == set()
    got = StaticTable.from_metadata(str(table)).scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["p"]) for r in got) == [(0, "a"), (1, "a"), (10, "a"), (11, "a")]
    assert verify_table(open_storage(str(table))).problems == []


def pq_ids(ids: list[int]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
    return buf.getvalue()
