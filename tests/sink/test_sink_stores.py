"""One streaming run per new backend, with a failure after the manifest write and a restart,
and every input id counted exactly once by our reader and independently.

* Azure (Azurite) and GCS (fake-gcs-server): ``direct`` mode, the default on object stores; the
  executors' Python workers write through adlfs/gcsfs and the driver commits. Spark itself
  cannot reach these emulators (no Hadoop connector jars here), so the independent count is
  pyarrow over the manifest's files.
* Hadoop (``hadoop+file://``): ``rename`` mode, its default; Spark writes the staged files,
  the driver renames and commits through the JVM; vanilla ``spark.read.parquet`` counts too.
"""

from __future__ import annotations

from collections import Counter

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from streaming_exactly_once import ExactlyOnceSink, read
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import FROM_ENV
from tests.datagen import write_csv_files
from tests.sink.conftest import stream

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _run_twice(spark, tmp_path, table, options, monkeypatch, mode):
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=7)

    def run():
        sink = ExactlyOnceSink(table, partition_by=["p"], storage_wrapper=FROM_ENV, storage_options=options)
        assert sink.staging_mode == mode  # the backend's default
        query = sink.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
        try:
            query.awaitTermination()
            return None
        except Exception as exc:
            return exc
        finally:
            sink.close()

    monkeypatch.setenv("SEO_FAIL_AT", "after-manifest@1")
    assert run() is not None
    monkeypatch.delenv("SEO_FAIL_AT")
    assert run() is None
    return ids


def _check(table, options, ids, scheme):
    want = Counter(ids)
    assert Counter(read.arrow(table, storage_options=options).column("id").to_pylist()) == want
    uris = read.files(table, storage_options=options)
    assert uris and all(u.startswith(f"{scheme}://") for u in uris)
    storage = open_storage(table, options)
    fs, _ = storage.filesystem()
    paths = [u.split("://", 1)[1] if scheme != "file" else u[len("file://") :] for u in uris]
    independent = ds.dataset(paths, filesystem=pafs.PyFileSystem(pafs.FSSpecHandler(fs)), format="parquet").to_table()
    assert Counter(independent.column("id").to_pylist()) == want
    report = verify_table(storage)
    assert report.problems == [], [p.to_json() for p in report.problems]


@pytest.mark.azure
def test_stream_to_azure(spark, tmp_path, azure_container, azure_options, monkeypatch):
    table = f"abfs://{azure_container}/events"
    ids = _run_twice(spark, tmp_path, table, azure_options, monkeypatch, "direct")
    _check(table, azure_options, ids, "abfs")


@pytest.mark.gcs
def test_stream_to_gcs(spark, tmp_path, gcs_bucket, gcs_options, monkeypatch):
    table = f"gs://{gcs_bucket}/events"
    ids = _run_twice(spark, tmp_path, table, gcs_options, monkeypatch, "direct")
    _check(table, gcs_options, ids, "gs")


@pytest.mark.hadoop
def test_stream_through_hadoop(spark, tmp_path, hadoop_storage, monkeypatch):
    table = "hadoop+" + hadoop_storage.root_uri
    ids = _run_twice(spark, tmp_path, table, {}, monkeypatch, "rename")
    _check(table, {}, ids, "file")
    assert Counter(r.id for r in spark.read.parquet(hadoop_storage.root_uri).select("id").collect()) == Counter(ids)
    with pytest.raises(Exception, match="staging_mode='rename'"):
        ExactlyOnceSink(table, staging_mode="direct")
