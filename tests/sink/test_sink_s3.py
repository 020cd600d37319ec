"""The sink writing to a real S3 API (moto server on 127.0.0.1) in direct mode.

Spark reads local input; the executors' Python workers write the data files through s3fs and
the driver commits through the S3 storage - no Hadoop S3 jars are involved.
"""

from __future__ import annotations

from collections import Counter

import pytest

from streaming_exactly_once import ExactlyOnceSink, read
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import FROM_ENV
from tests.datagen import write_csv_files
from tests.sink.conftest import stream

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def test_direct_mode_to_s3_exactly_once_across_a_failure(spark, tmp_path, s3_bucket, s3_options, monkeypatch):
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=7)
    table = f"s3://{s3_bucket}/events"

    def run():
        sink = ExactlyOnceSink(table, partition_by=["p"], storage_wrapper=FROM_ENV, storage_options=s3_options)
        assert sink.staging_mode == "direct"  # the default on object stores
        query = sink.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
        try:
            query.awaitTermination()
            return None
        except Exception as exc:
            return exc
        finally:
            sink.close()

    monkeypatch.setenv("SEO_FAIL_AT", "after-manifest@2")
    assert run() is not None
    monkeypatch.delenv("SEO_FAIL_AT")
    assert run() is None
    got = Counter(read.arrow(table, storage_options=s3_options).column("id").to_pylist())
    assert got == Counter(ids)
    assert all(u.startswith("s3://") for u in read.files(table, storage_options=s3_options))
    storage = open_storage(table, s3_options)
    report = verify_table(storage)
    assert report.problems == [], [p.to_json() for p in report.problems]
