"""The new user's case: ``ExactlyOnceSink`` pointed at a directory pandas wrote Parquet into.

Before, the first batch's manifest silently hid the 2 existing rows from every reader, vanilla
Spark included, and ``seo gc`` then deleted the file. Now ``start`` refuses the directory before
the query runs (nothing written, the rows still there), and ``adopt_existing_files=True`` makes
the file the table's batch 0, before the stream's first batch: every reader sees every row once."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest

from streaming_exactly_once import ExactlyOnceSink, read
from streaming_exactly_once.errors import ExistingFilesError, SchemaMismatchError
from streaming_exactly_once.testing.faults import FROM_ENV
from tests.cli.test_cli import seo

pytestmark = pytest.mark.spark


def _landing(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "events-0.csv").write_text("id,amount\n1,9.5\n2,0.25\n3,12.0\n")
    return landing


def test_a_pandas_directory_is_refused_at_start_and_adopted_when_asked(spark, tmp_path, capsys):
    table = tmp_path / "events"
    table.mkdir()
    pd.DataFrame({"id": [1000, 1001], "amount": [1.5, 2.5]}).to_parquet(table / "batch-job.parquet")
    stream = spark.readStream.schema("id LONG, amount DOUBLE").option("header", True).csv(str(_landing(tmp_path)))
    sink = ExactlyOnceSink(str(table))
    with pytest.raises(ExistingFilesError, match=r"batch-job\.parquet.*adopt_existing_files=True"):
        sink.start(stream, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    assert not spark.streams.active and sorted(p.name for p in table.iterdir()) == ["batch-job.parquet"]
    assert spark.read.parquet(str(table)).count() == 2  # nothing hid them
    sink = ExactlyOnceSink(str(table), adopt_existing_files=True)
    query = sink.start(stream, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    query.awaitTermination()
    sink.stop()
    expected = Counter([1000, 1001, 1, 2, 3])
    assert Counter(r.id for r in spark.read.parquet(str(table)).collect()) == expected  # vanilla Spark, through the manifest
    assert Counter(read.pandas(str(table))["id"]) == expected
    code, out, _ = seo(capsys, "gc", str(table), "--older-than", "0s")
    assert code == 0 and "deleted 0 orphan files" in out and (table / "batch-job.parquet").exists()
    code, out, _ = seo(capsys, "verify", str(table))
    assert code == 0, out
    code, out, _ = seo(capsys, "log", str(table))  # batch 0 is the adoption, batch 1 the stream's first
    assert code == 0 and "adopted existing files" in out.splitlines()[-2] and "adopted" not in out.splitlines()[-1], out


def test_a_stream_that_does_not_fit_the_adopted_files_fails_at_start(spark, tmp_path):
    table = tmp_path / "events"
    table.mkdir()
    pd.DataFrame({"id": ["a"], "amount": [1.5]}).to_parquet(table / "batch-job.parquet")  # id as text
    stream = spark.readStream.schema("id LONG, amount DOUBLE").option("header", True).csv(str(_landing(tmp_path)))
    sink = ExactlyOnceSink(str(table), adopt_existing_files=True)
    with pytest.raises(SchemaMismatchError, match=r"The stream does not fit the schema of table .* existing files it adopts"):
        sink.start(stream, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    assert not spark.streams.active and not (table / "_spark_metadata").exists()
    assert spark.read.parquet(str(table)).count() == 1


def test_a_first_batch_failing_after_its_move_is_not_seen_next_to_the_adopted_files(spark, tmp_path, monkeypatch):
    """The adopted files are a batch of their own, so the directory has a manifest before the
    first batch moves anything: a vanilla reader sees the existing rows alone until that batch
    commits - not the moved files of a batch that failed - and the restart adds its rows once."""
    table = tmp_path / "events"
    table.mkdir()
    pd.DataFrame({"id": [1000, 1001], "amount": [1.5, 2.5]}).to_parquet(table / "batch-job.parquet")
    stream = spark.readStream.schema("id LONG, amount DOUBLE").option("header", True).csv(str(_landing(tmp_path)))
    monkeypatch.setenv("SEO_FAIL_AT", "after-move")
    sink = ExactlyOnceSink(str(table), adopt_existing_files=True, storage_wrapper=FROM_ENV)
    query = sink.start(stream, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    with pytest.raises(Exception, match="after-move"):
        query.awaitTermination()
    sink.stop()
    assert sum(1 for p in table.iterdir() if p.name.startswith("part-")) > 0  # the batch's files were moved
    assert Counter(r.id for r in spark.read.parquet(str(table)).collect()) == Counter([1000, 1001])
    monkeypatch.delenv("SEO_FAIL_AT")
    sink = ExactlyOnceSink(str(table), adopt_existing_files=True)
    sink.start(stream, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True}).awaitTermination()
    sink.stop()
    assert Counter(r.id for r in spark.read.parquet(str(table)).collect()) == Counter([1000, 1001, 1, 2, 3])
    assert Counter(read.pandas(str(table), as_of=0)["id"]) == Counter([1000, 1001])
