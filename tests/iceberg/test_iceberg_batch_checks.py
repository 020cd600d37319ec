"""What a batch's files and schema bring to an Iceberg table, through the commit layer without
Spark: INT96 timestamps (refused before the WAL claim; a batch an earlier release published with
them is committed by ``seo recover --accept-int96``). Read back with pyiceberg alone, by path."""

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
    from streaming_exactly_once.commit import committer as committer_module

    table = tmp_path / "t"
    committer = iceberg_committer(open_storage(str(table)))
    commit_ts(committer, 0, [0, 1], int96=False)
    with monkeypatch.context() as m:  # the earlier release: no footer check before the claim
        m.setattr(committer_module, "staged_rows", lambda storage, path, table: None)
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
