"""Every reader on every new scheme, with ``storage_options``, as on S3: a table committed
through the commit protocol on Azurite (``az://``), fake-gcs-server (``gs://``) and Hadoop's
local filesystem through the Spark JVM (``hadoop+file://``), one batch per staging mode."""

from __future__ import annotations

from collections import Counter

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from streaming_exactly_once import read
from streaming_exactly_once.storage import open_storage
from tests.readers.tables import commit_batch, committer, rows_of


def _write(root: str, options) -> list[int]:
    c = committer(root, storage_options=options)
    commit_batch(c, 0, rows_of(0), mode="direct")
    commit_batch(c, 1, rows_of(1), mode="rename")
    c.close()
    return rows_of(0) + rows_of(1)


def _check_every_reader(root: str, options, expected: list[int], scheme: str) -> None:
    want = Counter(expected)
    assert Counter(read.arrow(root, storage_options=options).column("id").to_pylist()) == want
    assert Counter(read.pandas(root, storage_options=options)["id"]) == want
    assert Counter(read.polars(root, storage_options=options)["id"].to_list()) == want
    assert Counter(read.polars(root, lazy=True, storage_options=options).collect()["id"].to_list()) == want
    assert Counter(r[0] for r in read.duckdb(root, storage_options=options).project("id").fetchall()) == want
    assert len(read.arrow(root, storage_options=options, as_of=0)) == 10
    uris = read.files(root, storage_options=options)
    assert len(uris) == 4 and all(u.startswith(f"{scheme}://") for u in uris)
    assert [b.batch_id for b in read.batches(root, storage_options=options)] == [0, 1]
    # independently of our readers: pyarrow over exactly the manifest's files
    fs, _ = open_storage(root, options).filesystem()
    paths = [u.split("://", 1)[1] if scheme != "file" else u[len("file://") :] for u in uris]
    table = ds.dataset(paths, filesystem=pafs.PyFileSystem(pafs.FSSpecHandler(fs)), format="parquet").to_table()
    assert Counter(table.column("id").to_pylist()) == want


@pytest.mark.azure
def test_readers_on_azure(azure_container, azure_options):
    root = f"abfs://{azure_container}/events"
    _check_every_reader(root, azure_options, _write(root, azure_options), "abfs")


@pytest.mark.gcs
def test_readers_on_gcs(gcs_bucket, gcs_options):
    root = f"gs://{gcs_bucket}/events"
    _check_every_reader(root, gcs_options, _write(root, gcs_options), "gs")


@pytest.mark.spark
@pytest.mark.hadoop
def test_readers_on_hadoop_file(hadoop_storage):
    root = "hadoop+" + hadoop_storage.root_uri
    expected = _write(root, None)
    _check_every_reader(root, None, expected, "file")
    # the table is plain files on disk: the local backend reads the same rows
    assert Counter(read.arrow(hadoop_storage.root_uri).column("id").to_pylist()) == Counter(expected)
