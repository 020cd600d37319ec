"""``seo recover --rebuild-logs`` after an offsets record of a Kafka-reading query is lost: the
batch's source offsets come back from the query's Spark checkpoint, so the table's committed
offsets (``starting_offsets``, the offset guard) stay exact; where the checkpoint is gone too,
the command names the batches instead of silently lowering the marks."""

from __future__ import annotations

import os

import pytest

from streaming_exactly_once.checkpoint.offset_seq import OffsetSeq
from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.maintenance.repair import rebuild_logs
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer, stage_file

Q = "11111111-1111-1111-1111-111111111111"


def write_spark_offsets(checkpoint, batch_id: int, source_offsets: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}'
    (checkpoint / "offsets" / str(batch_id)).write_text(f"v1\n{meta}\n{source_offsets}")


@pytest.mark.parametrize("checkpoint_kept", [True, False])
def test_rebuilt_offsets_keep_the_committed_kafka_offsets(tmp_path, checkpoint_kept):
    root, checkpoint = tmp_path / "t", tmp_path / "ckpt"
    c = make_committer(open_storage(str(root)))
    c.ensure_open()
    for b in range(3):
        offsets = '{"t":{"0":%d}}' % (10 * (b + 1))
        write_spark_offsets(checkpoint, b, offsets)
        with c.batch(Q, b, mode="rename", checkpoint=str(checkpoint), offsets=OffsetSeq(1, {}, [offsets])) as attempt:
            c.storage.makedirs(attempt.staging_dir)
            f = stage_file(c.storage, attempt, f"p=a/part-{b}.txt", b"1,2")
            c.commit(attempt, [f], input_files=[InputFile(source=0, path=f"file:///in/{b}", timestamp=1)], num_rows=2)
    assert c.offset_marks() == {"t/0": 30}
    c.close()
    os.unlink(root / "_seo" / "offsets" / "2")
    if not checkpoint_kept:
        os.unlink(checkpoint / "offsets" / "2")
    report = rebuild_logs(open_storage(str(root)))
    assert report.offsets == [2]
    reopened = make_committer(open_storage(str(root)))
    reopened.open()
    if checkpoint_kept:
        assert report.offsets_unknown == [] and reopened.offset_marks() == {"t/0": 30}
    else:  # named, and the marks keep what the other records hold
        assert report.offsets_unknown == [2] and reopened.offset_marks() == {"t/0": 20}
    reopened.close()
