"""A WAL claim written before the Delta and Iceberg steps became one format step (its bytes kept
in ``fixtures/wal-format-steps-v7``, written by that release) reads back as the same steps and
writes back byte for byte - so a claim a writer of that release left behind rolls forward as
one of this release's would (the roll-forward tests of tests/delta and tests/iceberg run such
claims)."""

from __future__ import annotations

from pathlib import Path

from streaming_exactly_once.commit.protocol.sequence import CommitSequence
from streaming_exactly_once.commit.protocol.step import REGISTRY
from streaming_exactly_once.commit.protocol.steps import MoveFiles
from streaming_exactly_once.commit.table_steps.format_step import CommitDelta, CommitFormat, CommitIceberg
from streaming_exactly_once.delta.files import DeltaFile
from streaming_exactly_once.iceberg.files import IcebergFile
from streaming_exactly_once.iceberg.settings import IcebergCatalogRef

FIXTURE = Path(__file__).parent / "fixtures" / "wal-format-steps-v7"


def test_a_claim_written_before_the_one_format_step_reads_and_writes_back_byte_for_byte():
    data = FIXTURE.read_bytes()
    seq = CommitSequence.from_bytes(data, path=str(FIXTURE), batch_id=12)
    assert [type(s) for s in seq.steps] == [MoveFiles, CommitDelta, CommitIceberg, CommitDelta, CommitIceberg]
    assert REGISTRY["delta"] is CommitDelta and REGISTRY["iceberg"] is CommitIceberg
    assert all(isinstance(s, CommitFormat) for s in seq.steps[1:])
    delta, iceberg, member_delta, member_iceberg = seq.steps[1:]
    assert isinstance(delta, CommitDelta) and isinstance(iceberg, CommitIceberg)
    assert delta.files == [DeltaFile("p=a/part-0.parquet", 903, 1795313165250)]
    assert (delta.settings.checkpoint_interval, delta.settings.log_retention_ms) == (10, 2592000000)
    assert delta.table_schema is not None and "extra" in delta.table_schema
    assert delta.rewrites[0].replaced == [("p=a/a.parquet", 1000), ("p=a/b.parquet", 1000)]
    assert iceberg.files == [IcebergFile("p=a/part-0.parquet", 903, 1795313165250)]
    assert iceberg.catalog == IcebergCatalogRef("prod", "db.events") and iceberg.settings.min_count_to_merge == 50
    assert (member_delta.table, member_delta.schema, member_delta.info["groupBatchId"]) == ("orders", None, "9")
    assert member_iceberg.table == "orders" and member_iceberg.catalog == IcebergCatalogRef()
    assert seq.file_version == 7  # a delta step with rewrites
    assert seq.to_bytes() == data
