"""``seo verify`` finds data files whose schema disagrees with the table's; ``seo status`` shows the
schema and its history - on a table written before schema records existed (the issue's case: a
batch whose ``id`` is a string where the others have a long), and after a writer adopted it."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from streaming_exactly_once.commit.committer import StagedFile
from streaming_exactly_once.errors import SchemaMismatchError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.cli.test_cli import seo
from tests.commit.helpers import make_committer

Q = "77777777-7777-7777-7777-777777777777"
LONG_ID = json.dumps({"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]})


def commit_file(committer, spark_batch: int, table: pa.Table, schema: str | None):
    attempt = committer.begin(Q, spark_batch, mode="rename")
    staged = f"{attempt.staging_dir}/data/part-{spark_batch}.parquet"
    committer.storage.makedirs(staged.rsplit("/", 1)[0])
    pq.write_table(table, committer.storage.uri(staged)[len("file://") :])
    info = committer.storage.info(staged)
    return committer.commit(
        attempt, [StagedFile(f"part-{spark_batch}.parquet", info.size, info.mtime_ms, staged)], num_rows=table.num_rows, schema=schema
    )


def test_a_table_written_before_schema_records_is_checked_then_adopted(tmp_path, capsys):
    root = tmp_path / "t"
    storage = open_storage(str(root))
    c = make_committer(storage)
    c.open()
    commit_file(c, 0, pa.table({"id": pa.array([1, 2], pa.int64())}), LONG_ID)
    c.close()
    # what an earlier release left: no schema record, and a batch whose id is a string
    (root / "_seo" / "schema" / "0").unlink()
    c = make_committer(storage)
    c.open()
    c.schemas.current = None  # an earlier release checked nothing
    commit_file(c, 1, pa.table({"id": ["3"]}), None)
    c.close()
    shutil.rmtree(root / "_seo" / "schema")  # (its open adopted batch 0's schema: an earlier release would not have)
    report = verify_table(storage)
    kinds = {p.kind: p for p in report.problems}
    assert set(kinds) == {"file-schema", "no-table-schema"}, report.problems
    assert kinds["file-schema"].path.endswith("part-1.parquet") and "column 'id' as string, the table schema says long" in kinds["file-schema"].detail
    code, out, _ = seo(capsys, "verify", str(root))
    assert code == 1 and "file-schema" in out and "ERRORS" in out
    # the next writer adopts the schema of the newest commit record that has one, and enforces it
    c = make_committer(storage)
    c.open()
    assert (c.schemas.current.batch_id, c.schemas.current.reason) == (1, "adopt")
    try:
        commit_file(
            c,
            2,
            pa.table({"id": ["4"]}),
            json.dumps({"type": "struct", "fields": [{"name": "id", "type": "string", "nullable": True, "metadata": {}}]}),
        )
        raise AssertionError("a string id was accepted")
    except SchemaMismatchError as exc:
        assert "column 'id' is string in the batch, long in the table" in str(exc)
    c.close()
    code, out, _ = seo(capsys, "status", "--json", str(root))
    info = json.loads(out)
    assert info["schema"] == {"batchId": 1, "reason": "adopt", "partitionBy": [], "columns": [{"name": "id", "type": "long"}]}
    assert info["schemaHistory"] == [{"batchId": 1, "reason": "adopt", "changes": []}]
    code, out, _ = seo(capsys, "status", str(root))
    assert "id long (since batch 1)" in out and "batch 1 adopt" in out


def test_files_narrower_than_a_widened_table_are_a_warning(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, schema_evolution="add_and_widen")
    c.open()
    commit_file(c, 0, pa.table({"id": pa.array([1], pa.int32())}), LONG_ID.replace('"long"', '"integer"'))
    commit_file(
        c,
        1,
        pa.table({"id": pa.array([2], pa.int64()), "x": ["a"]}),
        json.dumps(
            {
                "type": "struct",
                "fields": [
                    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "x", "type": "string", "nullable": True, "metadata": {}},
                ],
            }
        ),
    )
    c.close()
    report = verify_table(storage)
    assert report.ok and [(p.severity, p.kind) for p in report.problems] == [("warning", "file-schema-narrower")]
    assert "1 file(s)" in report.problems[0].detail and report.problems[0].path.endswith("part-0.parquet")
    assert verify_table(storage, check_schemas=False).problems == []


def test_spark_4_variant_columns_plain_or_shredded_agree_with_a_variant_table_column(tmp_path):
    """Spark 4 stores a VARIANT column as Parquet's variant group - binary ``metadata`` and
    ``value``, and a ``typed_value`` where it shredded the values; Arrow reads it as a struct. That
    is the table's ``variant``, not a ``file-schema`` error; a string column still is one."""
    schema = json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                {"name": "var", "type": "variant", "nullable": True, "metadata": {}},
            ],
        }
    )
    plain = pa.struct([pa.field("metadata", pa.binary(), nullable=False), pa.field("value", pa.binary())])
    typed = pa.struct([pa.field("value", pa.binary()), pa.field("typed_value", pa.int64())])
    shredded = pa.struct(
        [
            pa.field("metadata", pa.binary(), nullable=False),
            pa.field("value", pa.binary()),
            pa.field("typed_value", pa.struct([pa.field("a", typed)])),
        ]
    )
    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage)
    c.open()
    commit_file(c, 0, pa.table({"id": [1], "var": pa.array([{"metadata": b"\x01\x00\x00", "value": b"\x0c\x01"}], plain)}), schema)
    value = {"metadata": b"\x01\x01\x00\x01a", "value": None, "typed_value": {"a": {"value": None, "typed_value": 1}}}
    commit_file(c, 1, pa.table({"id": [2], "var": pa.array([value], shredded)}), schema)
    c.close()
    assert verify_table(storage).problems == []
    c = make_committer(storage)
    c.open()
    commit_file(c, 2, pa.table({"id": [3], "var": ["{}"]}), schema)  # a file whose column is a string
    c.close()
    assert [(p.kind, p.severity) for p in verify_table(storage).problems] == [("file-schema", "error")]
