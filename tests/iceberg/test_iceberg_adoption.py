"""Existing Iceberg tables: adopted after a schema check, or refused with the difference named.

The tables are made by pyiceberg itself (its own writer, its own catalog, or a metadata file as
a Hadoop-catalog table has it), never by the layer under test."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from streaming_exactly_once.errors import IcebergSchemaMismatchError, IcebergTableError
from streaming_exactly_once.iceberg import IcebergCatalogRef
from streaming_exactly_once.storage import open_storage
from tests.iceberg.helpers import SCHEMA, batch_files, context, ids_of, run, step, target

ID = NestedField(1, "id", LongType(), required=False)
P = NestedField(2, "p", StringType(), required=False)
BY_P = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))


def hadoop_table(root: Path, schema: Schema, spec: PartitionSpec, *, location: str | None = None, **properties: str) -> None:
    """A table as Spark's Hadoop catalog leaves it: ``metadata/v1.metadata.json`` and the hint."""
    v3 = properties.pop("format-version", None) == "3"  # pyiceberg reads version 3 but does not write it
    metadata = json.loads(
        new_table_metadata(schema, spec, UNSORTED_SORT_ORDER, location or str(root), properties=dict(properties)).model_dump_json(exclude_none=True)
    )
    if v3:
        metadata.update({"format-version": 3, "next-row-id": 0})
    (root / "metadata").mkdir(parents=True)
    (root / "metadata" / "v1.metadata.json").write_text(json.dumps(metadata))
    (root / "metadata" / "version-hint.text").write_text("1")


def test_a_table_written_by_pyiceberg_is_adopted_and_gets_the_name_mapping_our_files_need(tmp_path):
    from pyiceberg.catalog import load_catalog

    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}
    catalog = load_catalog("existing", **props)
    catalog.create_namespace("db")
    theirs = catalog.create_table("db.t", Schema(ID, P), location=str(tmp_path / "t"), partition_spec=BY_P)
    theirs.append(pa.table({"id": pa.array([-1, -2], pa.int64()), "p": ["x", "y"]}))  # data files with field ids
    assert theirs.metadata.name_mapping() is None
    ref = IcebergCatalogRef("existing", "db.t")
    storage = open_storage(str(tmp_path / "t"))
    t = target(storage, catalog=ref, catalog_properties=props)
    t.check_batch(SCHEMA, ["p"])
    adopted = {f.path for f in t.live_files()}
    assert len(adopted) == 2 and all(p.startswith("data/") for p in adopted)  # what batch 0's manifest would include
    for b in range(2):
        run(step(b, batch_files(storage, b), catalog=ref), context(storage, {"existing": props}))
    table = catalog.load_table("db.t")
    assert table.metadata.name_mapping() is not None
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == Counter([-1, -2, *ids_of(0), *ids_of(1)])
    assert table.properties["commit.manifest-merge.enabled"] == "true"


@pytest.mark.parametrize(
    ("schema", "spec", "message"),
    [
        (Schema(NestedField(1, "id", IntegerType(), False), P), BY_P, r"column 'id' is long in the batch, int in the table"),
        (Schema(ID, P, NestedField(3, "must", StringType(), required=True)), BY_P, r"required column 'must' is not in the batch"),
        (
            Schema(NestedField(1, "p", StringType(), required=False)),
            PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "p")),
            r"column 'id' \(long\) is not in the table",
        ),
        (Schema(ID, P), UNPARTITIONED_PARTITION_SPEC, r"partitioned by nothing, the sink by \['identity\(p\)'\]"),
        (
            Schema(ID, P),
            PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket")),
            r"partitioned by \['bucket\[4\]\(id\)'\], the sink by \['identity\(p\)'\]",
        ),
    ],
    ids=["type", "required-missing", "extra-column", "unpartitioned", "bucket-transform"],
)
def test_a_table_the_batch_does_not_fit_is_refused_with_the_difference(tmp_path, schema, spec, message):
    hadoop_table(tmp_path / "t", schema, spec)
    storage = open_storage(str(tmp_path / "t"))
    with pytest.raises(IcebergSchemaMismatchError, match=message) as caught:
        run(step(0, batch_files(storage, 0)), context(storage))
    assert "v1.metadata.json" in str(caught.value) and "Nothing was written" in str(caught.value)
    assert sorted(p.name for p in (tmp_path / "t" / "metadata").iterdir()) == ["v1.metadata.json", "version-hint.text"]


def test_an_adopted_tables_required_columns_a_batch_may_leave_null_become_optional_with_its_snapshot(tmp_path):
    """Another engine's table requires ``id`` and its partition column ``p``; the sink's batches
    may leave both null (and its files do not hold ``p``): the first batch's commit makes them
    optional, in the metadata version of its snapshot, and pyiceberg reads the table."""
    from pyiceberg.table import StaticTable

    hadoop_table(tmp_path / "t", Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "p", StringType(), required=True)), BY_P)
    storage = open_storage(str(tmp_path / "t"))
    run(step(0, batch_files(storage, 0)), context(storage))
    table = StaticTable.from_metadata(str(tmp_path / "t"))
    assert table.metadata.location.endswith("/t") and [f.required for f in table.schema().fields] == [False, False]
    assert sorted(p.name for p in (tmp_path / "t" / "metadata").glob("v*.metadata.json")) == ["v1.metadata.json", "v2.metadata.json"]
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == Counter(ids_of(0))


@pytest.mark.parametrize(
    ("properties", "location", "message"),
    [
        ({"format-version": "3"}, None, r"format version 3"),
        ({}, "/elsewhere/t", r"its location is /elsewhere/t, not the sink's table directory"),
        ({"encryption.key-id": "k1"}, None, r"encrypted \(encryption.key-id\)"),
        (
            {"schema.name-mapping.default": json.dumps([{"names": ["id"], "field-id": 2}, {"names": ["p"], "field-id": 1}])},
            None,
            r"name mapping .* maps 'id' to field id 2, but that column's id is 1",
        ),
    ],
    ids=["format-v3", "location", "encrypted", "name-mapping"],
)
def test_table_features_an_append_of_our_files_would_break_are_refused(tmp_path, properties, location, message):
    hadoop_table(tmp_path / "t", Schema(ID, P), BY_P, location=location, **properties)
    storage = open_storage(str(tmp_path / "t"))
    with pytest.raises(IcebergTableError, match=message):
        target(storage).check_batch(SCHEMA, ["p"])
    with pytest.raises(IcebergTableError, match=message):
        run(step(0, batch_files(storage, 0)), context(storage))
    assert not (tmp_path / "t" / "metadata" / "v2.metadata.json").exists()


def test_batches_iceberg_has_no_type_for_are_refused_before_the_claim(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    odd = json.dumps({"type": "struct", "fields": [{"name": "x", "type": "void", "nullable": True, "metadata": {}}]})
    with pytest.raises(IcebergSchemaMismatchError, match=r"column x has Spark type 'void'"):
        target(storage).check_batch(odd, [])
    ts = json.dumps({"type": "struct", "fields": [{"name": "t", "type": "timestamp", "nullable": True, "metadata": {}}]})
    with pytest.raises(IcebergSchemaMismatchError, match=r"partition column 't' has Spark type \"timestamp\""):
        target(storage).check_batch(ts, ["t"])
    with pytest.raises(IcebergSchemaMismatchError, match="came without a schema"):
        target(storage).check_batch(None, [])


def test_a_hadoop_catalog_table_is_appended_to_at_the_version_after_its_own(tmp_path):
    hadoop_table(tmp_path / "t", Schema(ID, P), BY_P)
    storage = open_storage(str(tmp_path / "t"))
    for b in range(2):
        run(step(b, batch_files(storage, b)), context(storage))
    assert (tmp_path / "t" / "metadata" / "version-hint.text").read_text() == "3"
    from tests.iceberg.helpers import iceberg_ids

    assert iceberg_ids(str(tmp_path / "t")) == Counter([*ids_of(0), *ids_of(1)])


def test_damaged_metadata_is_named_and_nothing_is_committed(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    run(step(0, batch_files(storage, 0)), context(storage))
    (tmp_path / "t" / "metadata" / "v1.metadata.json").write_text('{"truncated": ')
    with pytest.raises(IcebergTableError, match=r"does not load: .*Restore the file from a backup"):
        run(step(1, batch_files(storage, 1)), context(storage))
    assert not (tmp_path / "t" / "metadata" / "v2.metadata.json").exists()
