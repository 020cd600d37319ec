"""The path-based default on every storage the library supports (except HDFS, which needs Spark):
the table's metadata files are created with each backend's own create-if-absent, and the table
reads back through pyiceberg - on S3 also through pyiceberg's own S3 client, which shares
nothing with ours."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.iceberg.helpers import APP, batch_files, context, ids_of, run, step, target


@pytest.fixture(
    params=[
        "memory",
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("azure", marks=pytest.mark.azure),
        pytest.param("gcs", marks=pytest.mark.gcs),
    ]
)
def object_storage(request):
    return request.getfixturevalue(f"{request.param}_storage")


def test_each_batch_is_one_snapshot_on_every_store(object_storage):
    storage = object_storage
    ctx = context(storage)
    for b in range(3):
        run(step(b, batch_files(storage, b)), ctx)
    run(step(1, batch_files(storage, 1, tag="-replay")), context(storage))  # a replay adds nothing
    names = sorted(e.name for e in storage.list_dir("metadata"))
    assert [n for n in names if n.endswith(".metadata.json")] == ["v1.metadata.json", "v2.metadata.json", "v3.metadata.json"]
    assert storage.read_bytes("metadata/version-hint.text") == b"3"
    t = target(storage)
    assert t.applied_batch() == 2
    table = t.load()
    assert table is not None and table.metadata.location == storage.root_uri
    summaries = [s.summary for s in table.metadata.snapshots]
    assert [(s["seo.app-id"], s["seo.batch-id"]) for s in summaries] == [(APP, "0"), (APP, "1"), (APP, "2")]
    # pyiceberg plans and reads the scan through our storage's FileIO
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == Counter(i for b in range(3) for i in ids_of(b))


@pytest.mark.s3
def test_pyiceberg_reads_the_s3_table_with_its_own_client(s3_storage, s3_options):
    from pyiceberg.table import StaticTable

    ctx = context(s3_storage)
    for b in range(2):
        run(step(b, batch_files(s3_storage, b)), ctx)
    props = {
        "s3.endpoint": s3_options["endpoint_url"],
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
        "s3.region": "us-east-1",
    }
    table = StaticTable.from_metadata(s3_storage.root_uri, properties=props)  # through metadata/version-hint.text
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == Counter(i for b in range(2) for i in ids_of(b))
