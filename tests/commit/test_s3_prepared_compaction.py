"""#14 goal 3 on S3: a writer begins its next compact file in the background - one multipart
upload whose first part the server copies from the previous compact object - and the
compaction batch sends only the deltas and its own records. Against moto's S3 server."""

from __future__ import annotations

import pytest

from streaming_exactly_once.commit.background.compaction_preparation import CompactionPreparation
from streaming_exactly_once.manifest.manifest_index import write_index
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.storage.s3 import SERVER_SIDE_COPY
from tests.commit.helpers import make_committer, stage_and_commit

pytestmark = pytest.mark.s3

QUERY = "51515151-5151-5151-5151-515151515151"
SEEDED = 40_000  # a 9.compact of ~5.8 MB: above S3's 5 MiB part minimum, so it is copied


def _seed(storage, root_uri: str) -> None:
    """A table adopted from Spark's file sink: its manifest is one large 9.compact, with the
    reader index that vouches for copying it unread (``seo index``)."""
    line = (
        '{"path":"%s/seed/part-%%08d.parquet","size":1000,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}'
    ) % root_uri
    storage.put_if_absent("_spark_metadata/9.compact", ("v1" + "".join("\n" + line % i for i in range(SEEDED))).encode())
    assert write_index(storage, 9)


def test_compactions_on_s3_are_prepared_and_list_every_file(s3_bucket, s3_options, monkeypatch):
    published: list[int] = []
    original = CompactionPreparation._publish_upload

    def counting(self, uploads, upload, own_tail, *, context):
        result = original(self, uploads, upload, own_tail, context=context)
        if result:
            published.append(upload.compact_id)
        return result

    monkeypatch.setattr(CompactionPreparation, "_publish_upload", counting)
    storage = open_storage(f"s3://{s3_bucket}/t", {**s3_options, SERVER_SIDE_COPY: True})
    _seed(storage, storage.root_uri)
    committer = make_committer(storage)
    committer.open()
    for spark_batch in range(20):  # manifest batches 10..29: compactions 19 and 29
        if committer.latest_batch_id + 1 in (19, 29):
            committer.janitor.drain()  # the background copy is done: deterministic, not a race
        result = stage_and_commit(committer, QUERY, spark_batch, [2 * spark_batch, 2 * spark_batch + 1], mode="direct")
        assert result is not None and result.status == "committed"
    committer.close()
    assert published == [19, 29]  # both compactions completed the upload begun before their batch
    files = ManifestLog(storage).files()
    assert len(files) == SEEDED + 40 and len({e.uri for e in files}) == SEEDED + 40
    assert storage.read_bytes("_spark_metadata/29.compact").startswith(storage.read_bytes("_spark_metadata/19.compact"))


def test_a_fenced_writer_aborts_its_begun_upload_when_it_closes(s3_bucket, s3_options):
    """Red team: a fenced writer leaves its work files alone at close, but its begun upload -
    a server-side copy of the whole previous compact file - is aborted by its own id."""
    import boto3

    storage = open_storage(f"s3://{s3_bucket}/t", {**s3_options, SERVER_SIDE_COPY: True})
    _seed(storage, storage.root_uri)
    clock = [1000.0]
    zombie = make_committer(storage, timeout_ms=5_000)
    zombie.lease.clock = lambda: clock[0]
    zombie.open()
    zombie.janitor.drain()
    client = boto3.client(
        "s3", endpoint_url=s3_options["endpoint_url"], aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )

    def pending():
        return sorted(u["UploadId"] for u in client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []))

    [zombies] = pending()
    clock[0] += 10  # the zombie is paused past its lease
    successor = make_committer(storage, timeout_ms=5_000)
    successor.lease.clock = lambda: clock[0]
    successor.open()
    successor.janitor.drain()
    assert zombie.lease.is_fenced()
    zombie.close()
    assert zombies not in pending() and len(pending()) == 1  # the successor's own stays
    successor.close()
    assert pending() == []
