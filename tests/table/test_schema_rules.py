"""The table schema rules (``table.schema_rules``) and its records (``table.schema_log``), without Spark."""

from __future__ import annotations

import json

import pytest

from streaming_exactly_once.commit.table_schema import TableSchema
from streaming_exactly_once.errors import DeltaSchemaMismatchError, IcebergSchemaMismatchError, LogCorruptError, SchemaMismatchError
from streaming_exactly_once.table.commits_log import CommitsLog
from streaming_exactly_once.table.schema_log import SchemaRecord, forget_after, schema_as_of, schema_path
from streaming_exactly_once.table.schema_rules import advice, compare, fields_of


def schema(*columns: str, not_null: tuple[str, ...] = ()) -> str:
    """``schema("id long", "v string")`` as Spark's schema JSON."""
    fields = []
    for column in columns:
        name, type_ = column.split()
        fields.append({"name": name, "type": type_, "nullable": name not in not_null, "metadata": {}})
    return json.dumps({"type": "struct", "fields": fields})


TABLE = schema("id long", "v double", "p string")


def kinds(verdict) -> list[tuple[str, str]]:
    return [(m.column, m.kind) for m in verdict.mismatches]


def test_the_same_columns_fit_whatever_their_order_and_nullability():
    verdict = compare(TABLE, ["p"], schema("p string", "v double", "id long", not_null=("id",)), ["p"])
    assert verdict.fits and not verdict.changed and verdict.schema == TABLE
    assert verdict.reordered and not verdict.casts and not verdict.fills


def test_a_nullable_batch_column_makes_a_non_nullable_table_column_nullable():
    table = schema("id long", "v double", not_null=("id",))
    verdict = compare(table, [], schema("id long", "v double"), [])
    assert verdict.fits and verdict.changes == ("'id' may hold nulls",)
    assert [f["nullable"] for f in fields_of(verdict.schema)] == [True, True]
    # a Delta or Iceberg table too: its own schema drops the NOT NULL in the batch's commit
    assert compare(table, [], schema("id long", "v double"), [], table_format="delta").changes == ("'id' may hold nulls",)


def test_nested_fields_elements_and_values_the_batch_may_leave_null_become_nullable():
    def nested(null: bool) -> str:
        fields = [
            {"name": "s", "type": {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": null, "metadata": {}}]}},
            {"name": "a", "type": {"type": "array", "elementType": "long", "containsNull": null}},
            {"name": "m", "type": {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": null}},
        ]
        return json.dumps({"type": "struct", "fields": [{**f, "nullable": False, "metadata": {}} for f in fields]})

    verdict = compare(nested(False), [], nested(True), [], table_format="delta")
    assert verdict.fits and verdict.changes == tuple(f"nested fields of {c!r} may hold nulls" for c in "sam")
    assert fields_of(verdict.schema) == fields_of(nested(True))
    stricter = compare(nested(True), [], nested(False), [])  # a batch that promises more changes nothing
    assert stricter.fits and not stricter.changed


def test_a_first_batch_creates_the_schema():
    verdict = compare(None, [], schema("id long"), [])
    assert verdict.changed and verdict.changes == ("created",) and fields_of(verdict.schema)[0]["name"] == "id"


def test_type_changes_readers_cannot_read_are_refused_in_every_mode():
    for evolution in ("none", "add_columns", "add_and_widen"):
        verdict = compare(TABLE, ["p"], schema("id string", "v double", "p string"), ["p"], evolution=evolution)
        assert kinds(verdict) == [("id", "type")]
        assert verdict.mismatches[0].summary() == "column 'id' is string in the batch, long in the table"
    nested = json.dumps(
        {
            "type": "struct",
            "fields": [{"name": "s", "type": {"type": "array", "elementType": "long", "containsNull": True}, "nullable": True, "metadata": {}}],
        }
    )
    other = nested.replace('"long"', '"string"')
    assert kinds(compare(nested, [], other, [], evolution="add_and_widen")) == [("s", "type")]
    assert compare(nested, [], nested.replace('"containsNull": true', '"containsNull": false'), []).fits  # nullability only


def test_a_narrower_batch_column_is_cast_up_and_a_missing_nullable_one_filled():
    verdict = compare(TABLE, ["p"], schema("id integer", "p string"), ["p"])
    assert verdict.fits and not verdict.changed
    assert verdict.casts == ("id",) and verdict.fills == ("v",) and verdict.needs_alignment


def test_a_missing_non_nullable_column_is_refused():
    table = schema("id long", "v double", not_null=("id",))
    verdict = compare(table, [], schema("v double"), [], evolution="add_and_widen")
    assert kinds(verdict) == [("id", "dropped")]


def test_new_columns_need_add_columns_and_are_added_nullable_at_the_end():
    batch = schema("extra string", "id long", "v double", "p string", not_null=("extra",))
    assert kinds(compare(TABLE, ["p"], batch, ["p"])) == [("extra", "added")]
    verdict = compare(TABLE, ["p"], batch, ["p"], evolution="add_columns")
    assert verdict.fits and verdict.changed and verdict.changes == ("added column 'extra' (string)",)
    assert [(f["name"], f["nullable"]) for f in fields_of(verdict.schema)] == [("id", True), ("v", True), ("p", True), ("extra", True)]
    assert kinds(compare(TABLE, ["p"], batch, ["p"], evolution="add_columns", file_format="csv")) == [("extra", "added")]


def test_wider_types_need_add_and_widen_and_never_widen_a_delta_table():
    table = schema("id integer", "v float")
    batch = schema("id long", "v double")
    assert kinds(compare(table, [], batch, [], evolution="add_columns")) == [("id", "widen"), ("v", "widen")]
    verdict = compare(table, [], batch, [], evolution="add_and_widen")
    assert verdict.fits and verdict.changes == ("widened 'id': integer -> long", "widened 'v': float -> double")
    assert [f["type"] for f in fields_of(verdict.schema)] == ["long", "double"]
    assert kinds(compare(table, [], batch, [], evolution="add_and_widen", table_format="delta")) == [("id", "widen"), ("v", "widen")]
    assert kinds(compare(schema("id long"), [], schema("id double"), [], evolution="add_and_widen")) == [("id", "type")]  # lossy


def test_a_case_only_rename_and_other_partition_columns_are_refused():
    verdict = compare(TABLE, ["p"], schema("ID long", "v double", "p string"), ["v"], evolution="add_columns")
    assert kinds(verdict) == [("(partition columns)", "partitioning"), ("id", "case")]
    assert verdict.mismatches[0].summary() == "the table is partitioned by ['p'], the sink by ['v']"
    assert verdict.mismatches[1].summary() == "column 'id' (long) is 'ID' in the batch, a name differing only in case"


def test_the_error_shows_both_sides_and_says_what_to_do(memory_storage):
    guard = TableSchema(memory_storage)
    guard.current = SchemaRecord(0, "create", ("p",), TABLE)
    with pytest.raises(SchemaMismatchError) as err:
        guard.check(schema("id string", "v double", "p string", "extra long"), ["p"], what="Batch 3 of query q")
    text = str(err.value)
    assert text.startswith(f"Batch 3 of query q does not fit the schema of table {memory_storage.root_uri} (schema in ")
    assert "_seo/schema/0" in text and "Nothing was written." in text
    lines = text.splitlines()
    assert lines[1].split() == ["column", "table", "batch", "problem"]
    assert lines[2].split()[:3] == ["id", "long", "string"] and lines[3].split()[:3] == ["extra", "-", "long"]
    assert "cast('long')" in text and "schema_evolution='add_columns'" in text
    assert [m["kind"] for m in err.value.mismatches] == ["type", "added"]
    guard.table_format = "delta"
    with pytest.raises(DeltaSchemaMismatchError):  # a SchemaMismatchError too
        guard.check(schema("id string", "v double", "p string"), ["p"], what="The stream")
    guard.table_format = "iceberg"  # an Iceberg table's: its own error, naming the format
    guard.current = SchemaRecord(0, "create", ("p",), schema("id integer", "p string"))
    with pytest.raises(IcebergSchemaMismatchError, match="(?s)schema of Iceberg table .*Iceberg tables are not widened") as err:
        guard.check(schema("id long", "p string"), ["p"], what="The stream")
    assert "Delta" not in str(err.value)


def test_the_example_fix_names_the_column_that_differs():
    table = schema("id long", "amount double", "Day string")
    text = advice(compare(table, [], schema("id long", "amount string", "Day string"), []).mismatches, table_format=None)
    assert "df.withColumn('amount', col('amount').cast('double'))" in text and "'id'" not in text
    text = advice(compare(table, [], schema("id long", "amount double", "day string"), []).mismatches, table_format=None)
    assert "df.withColumnRenamed('day', 'Day')" in text
    nested = schema("id long", "amount double")
    array = {"type": "array", "elementType": "double", "containsNull": True}
    nested_batch = json.dumps({"type": "struct", "fields": [*json.loads(nested)["fields"][:1], {"name": "amount", "type": array, "nullable": True}]})
    text = advice(compare(nested_batch, [], nested, []).mismatches, table_format=None)
    assert text.startswith("select and cast") and "e.g." not in text  # no short cast for a nested type


def test_files_written_narrower_than_the_table_are_refused_by_the_committer(memory_storage):
    guard = TableSchema(memory_storage)
    guard.current = SchemaRecord(0, "create", (), schema("id long"))
    assert guard.check(schema("id integer"), [], what="b").casts == ("id",)  # the sink casts it
    with pytest.raises(SchemaMismatchError, match="narrower than the table's"):
        guard.check_files(schema("id integer"), [], what="b")


def test_the_record_bytes_and_the_schema_of_a_batch(memory_storage):
    record = SchemaRecord(7, "evolve", ("day",), schema("id long"), ("added column 'id' (long)",))
    assert record.to_bytes() == (
        b'v1\n{"batchId":7,"reason":"evolve","partitionBy":["day"],"schema":"{\\"type\\": \\"struct\\", \\"fields\\": '
        b'[{\\"name\\": \\"id\\", \\"type\\": \\"long\\", \\"nullable\\": true, \\"metadata\\": {}}]}",'
        b'"changes":["added column \'id\' (long)"]}'
    )
    memory_storage.put_if_absent(schema_path(0), SchemaRecord(0, "create", (), schema("a long")).to_bytes())
    memory_storage.put_if_absent(schema_path(7), record.to_bytes())
    assert schema_as_of(memory_storage, 6).batch_id == 0 and schema_as_of(memory_storage, 7) == record
    assert forget_after(memory_storage, 6) == [7] and schema_as_of(memory_storage, 9).batch_id == 0
    memory_storage.put_if_absent(schema_path(8), b'v1\n{"batchId":9}')
    with pytest.raises(LogCorruptError, match="_seo/schema/8"):
        schema_as_of(memory_storage, 8)


def test_a_table_without_a_record_adopts_its_newest_commit_schema_at_open(memory_storage, caplog):
    from streaming_exactly_once.table.attempt_key import AttemptKey
    from streaming_exactly_once.table.commits_log import CommitRecord

    commits = CommitsLog(memory_storage, interval=10)
    for b in range(3):  # written before schema records existed
        key = AttemptKey(b, "q", b, 1, "a", "rename")
        commits.add(b, [CommitRecord.of(key, num_files=1, num_rows=1, num_bytes=1, commit_time_ms=1, schema=schema("id long"))])
    memory_storage.put_if_absent(schema_path(5), SchemaRecord(5, "create", (), schema("x long")).to_bytes())  # a discarded claim's
    guard = TableSchema(memory_storage)
    guard.load(2, commits=commits, first_batch_id=0, partition_by=())
    assert guard.current == SchemaRecord(2, "adopt", (), schema("id long"))
    assert schema_as_of(memory_storage, 10).batch_id == 2  # the stray record above the latest batch is gone
    assert "adopted the schema of its batch 2" in caplog.text
