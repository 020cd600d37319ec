"""S3: a composed file is a multipart upload whose bulk is copied by the server (``UploadPartCopy``)
and whose completion is conditional (``If-None-Match: *``), against moto's real S3 HTTP API.

Why it matters (#14): a ``.compact`` file starts with the previous one, hundreds of MB at a
million live files; the server copies them instead of this process downloading and uploading
them. The endpoint that ignores the conditional completion is real too: the HTTP proxy of
``test_exclusive_probe`` dropping ``If-None-Match`` from POST requests only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import boto3
import pytest

from streaming_exactly_once.commit.background.compaction_preparation import preparation_of
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.storage.base import ByteRange, composed_files
from streaming_exactly_once.storage.s3 import SERVER_SIDE_COPY
from tests.storage.test_exclusive_probe import S3Proxy

pytestmark = pytest.mark.s3

BIG = b"v1" + b"".join(b'\n{"path":"s3://b/part-%08d.parquet","size":1}' % i for i in range(150_000))  # ~6.6 MB


def _client(s3_options):
    return boto3.client(
        "s3", endpoint_url=s3_options["endpoint_url"], aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )


def _pending_uploads(s3_options, bucket):
    return _client(s3_options).list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def _through(proxy, bucket, s3_options):
    # a root of its own: the probe's answer is cached per endpoint (the proxy's) and bucket
    return open_storage(f"s3://{bucket}/root", {**s3_options, "endpoint_url": proxy.url, SERVER_SIDE_COPY: True})


def _direct(bucket, s3_options):
    return open_storage(f"s3://{bucket}/root", {**s3_options, SERVER_SIDE_COPY: True})


def _own_requests(proxy, key):
    return [(m, p.split("?", 1)[1] if "?" in p else "") for m, p in proxy.sent if p.split("?", 1)[0].endswith("/" + key)]


def test_the_server_copies_the_range_and_the_bytes_are_identical(moto_endpoint, s3_bucket, s3_options):
    with S3Proxy(moto_endpoint, strip=False) as proxy:
        storage = _through(proxy, s3_bucket, s3_options)
        _direct(s3_bucket, s3_options).put_if_absent("log/9.compact", BIG)  # the proxy forwards small bodies only
        tail = b'\n{"path":"s3://b/new.parquet","size":2}'
        composed_files(storage).put_composed_if_absent("log/19.compact", [ByteRange("log/9.compact", 0, len(BIG)), tail])
        assert storage.read_bytes("log/19.compact") == BIG + tail
        # the previous compact file was never downloaded: only measured (HEAD) and copied
        assert not [q for m, q in _own_requests(proxy, "9.compact") if m == "GET"]
        target = _own_requests(proxy, "19.compact")
        assert [m for m, q in target if "partNumber" in q] == ["PUT", "PUT"]  # the copied part, the tail part
        assert ("POST", "uploads") in target and not [q for m, q in target if m == "PUT" and not q]  # no single PUT
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_a_range_in_the_middle_and_no_tail(moto_endpoint, s3_bucket, s3_options):
    storage = open_storage(f"s3://{s3_bucket}/root", {**s3_options, SERVER_SIDE_COPY: True})
    storage.put_if_absent("src", BIG)
    composed_files(storage).put_composed_if_absent("mid", [ByteRange("src", 7, len(BIG) - 100)])
    assert storage.read_bytes("mid") == BIG[7 : len(BIG) - 93]


def test_an_existing_target_is_refused_and_nothing_is_left_behind(moto_endpoint, s3_bucket, s3_options):
    storage = open_storage(f"s3://{s3_bucket}/root", {**s3_options, SERVER_SIDE_COPY: True})
    storage.put_if_absent("log/9.compact", BIG)
    storage.put_if_absent("log/19.compact", b"another writer's")
    with pytest.raises(FileExistsError):
        composed_files(storage).put_composed_if_absent("log/19.compact", [ByteRange("log/9.compact", 0, len(BIG)), b"\n{}"])
    assert storage.read_bytes("log/19.compact") == b"another writer's"
    assert _pending_uploads(s3_options, s3_bucket) == []  # the refused upload was aborted


@pytest.mark.hazard
def test_racing_copies_on_moto(moto_endpoint, s3_bucket, s3_options):
    """moto's conditional CompleteMultipartUpload looks the key up, then assembles the parts,
    with no lock in between, so racing completes can all win there (seen in most runs with 6
    threads). AWS S3 decides a conditional completion atomically (412, or 409 for a conflicting
    one in flight, which this backend retries). Opt-in (``pytest --hazards``), not a gate: the
    refusal of a completion over an existing key is tested deterministically above."""
    storage = open_storage(f"s3://{s3_bucket}/root", {**s3_options, SERVER_SIDE_COPY: True})
    storage.put_if_absent("src", BIG)
    results: list[str] = []

    def attempt(i: int) -> None:
        try:
            composed_files(storage).put_composed_if_absent("race", [ByteRange("src", 0, len(BIG)), b"\n%d" % i])
            results.append(f"won {i}")
        except FileExistsError:
            results.append("lost")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r.split()[1].encode() for r in results if r.startswith("won")]
    assert len(results) == 6 and winners
    assert storage.read_bytes("race") in [BIG + b"\n" + w for w in winners]
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_a_small_range_is_one_conditional_put(moto_endpoint, s3_bucket, s3_options):
    with S3Proxy(moto_endpoint, strip=False) as proxy:
        storage = _through(proxy, s3_bucket, s3_options)
        storage.put_if_absent("small", b"v1\n{}")
        composed_files(storage).put_composed_if_absent("out", [ByteRange("small", 0, 5), b"\n{}"])
        assert storage.read_bytes("out") == b"v1\n{}\n{}"
        assert [m for m, q in _own_requests(proxy, "out") if m in ("PUT", "POST")] == ["PUT"]


def test_an_endpoint_ignoring_the_conditional_complete_gets_single_puts(moto_endpoint, s3_bucket, s3_options):
    """Not refusing a second conditional CompleteMultipartUpload is found by the probe once,
    and composed files then take the single conditional PUT - still exclusive."""
    with S3Proxy(moto_endpoint, strip=True, strip_methods=("POST",)) as proxy:
        storage = _through(proxy, s3_bucket, s3_options)
        storage.check_exclusive_create("_seo/probe")  # PUTs keep their header: exclusive create is fine
        assert storage.conditional_complete_works("_seo/probe") is False
        _direct(s3_bucket, s3_options).put_if_absent("src", BIG)
        composed = composed_files(storage)
        composed.put_composed_if_absent("out", [ByteRange("src", 0, len(BIG)), b"\n{}"])
        assert storage.read_bytes("out") == BIG + b"\n{}"
        assert not [q for m, q in _own_requests(proxy, "out") if "upload" in q.lower()]  # no multipart upload at all
        with pytest.raises(FileExistsError):
            composed.put_composed_if_absent("out", [ByteRange("src", 0, len(BIG)), b"\n{}"])
        assert storage.list_dir("_seo/probe") == []
    assert _pending_uploads(s3_options, s3_bucket) == []


_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from streaming_exactly_once.commit.background.compaction_preparation import preparation_of
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.storage.base import ByteRange
storage = open_storage({root!r}, {{**{options!r}, 'seo_server_side_copy': True}})
storage.put_composed_if_absent("log/19.compact", [ByteRange("log/9.compact", 0, {size}), b"\\n{{}}"])
"""


def test_a_process_killed_mid_upload_leaves_no_object(moto_endpoint, s3_bucket, s3_options):
    """The crash window: the writer dies after the server started copying (its part request is
    held by the proxy until then). No object appears - an upload is invisible until completed -
    and a later writer creates the file normally."""
    copying, release = threading.Event(), threading.Event()

    def hold_the_copy(method: str, path: str) -> None:
        if method == "PUT" and "19.compact" in path and "partNumber=1" in path:
            copying.set()
            release.wait(30)

    with S3Proxy(moto_endpoint, strip=False, on_request=hold_the_copy) as proxy:
        storage = open_storage(f"s3://{s3_bucket}/root", {**s3_options, SERVER_SIDE_COPY: True})
        storage.put_if_absent("log/9.compact", BIG)
        repo = str(Path(__file__).resolve().parents[2])
        options = {**s3_options, "endpoint_url": proxy.url}
        source = _CHILD.format(repo=repo, root=f"s3://{s3_bucket}/root", options=options, size=len(BIG))
        child = subprocess.Popen([sys.executable, "-c", source], env={**os.environ, "PYTHONPATH": repo})
        try:
            assert copying.wait(60), "the child never started its copy"
            child.send_signal(signal.SIGKILL)
            child.wait(30)
        finally:
            release.set()
    assert not storage.exists("log/19.compact")
    assert [e.name for e in storage.list_dir("log")] == ["9.compact"]
    pending = _pending_uploads(s3_options, s3_bucket)
    assert [u["Key"] for u in pending] == ["root/log/19.compact"]  # invisible; a lifecycle rule removes it
    composed_files(storage).put_composed_if_absent("log/19.compact", [ByteRange("log/9.compact", 0, len(BIG)), b"\n{}"])
    assert storage.read_bytes("log/19.compact") == BIG + b"\n{}"


def test_compaction_on_s3_copies_and_matches_the_streamed_bytes(s3_storage, memory_storage):
    from streaming_exactly_once.log.codec import DictCodec
    from streaming_exactly_once.log.compactible_log import CompactibleLog

    logs = [CompactibleLog(st, "c", DictCodec(), default_interval=4) for st in (s3_storage, memory_storage)]
    for log in logs:
        log.copy_vouched = lambda batch_id: True  # as the manifest does for a file with a matching index
        log.storage.put_if_absent("c/3.compact", BIG)
        log._note(3)
    for i in range(4, 8):
        for log in logs:
            log.add(i, [{"id": i, "u": uuid.UUID(int=i).hex}])
    assert logs[0].compact_range(3, context="test") is not None  # large enough to be copied
    assert s3_storage.read_bytes("c/7.compact") == memory_storage.read_bytes("c/7.compact")


def test_server_side_copy_is_off_unless_asked_for(moto_endpoint, s3_bucket, s3_options):
    """Its exclusivity is the store's (moto's conditional complete is racy): opt in only."""
    assert composed_files(open_storage(f"s3://{s3_bucket}/root", s3_options)) is None
    assert composed_files(open_storage(f"s3://{s3_bucket}/root", {**s3_options, SERVER_SIDE_COPY: True})) is not None


def _refusing_the_copy(storage, monkeypatch):
    """AWS's answer to ``UploadPartCopy`` with ``CopySourceIfMatch`` once the source object has
    another ETag - 412 PreconditionFailed - injected where s3fs raises it: moto ignores the
    header. Returns the ``CopySourceIfMatch`` values the copies were sent with."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    real, sent = storage._fs.call_s3, []

    def call(method, *args, **kwargs):
        if method == "upload_part_copy":
            sent.append(kwargs.get("CopySourceIfMatch"))
            error = {
                "Code": "PreconditionFailed",
                "Message": "At least one of the pre-conditions you specified did not hold",
                "Condition": "x-amz-copy-source-If-Match",
            }
            raise translate_boto_error(ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 412}}, "UploadPartCopy"))
        return real(method, *args, **kwargs)

    monkeypatch.setattr(storage._fs, "call_s3", call)
    return sent


def test_a_source_changed_under_the_copy_is_a_named_error(moto_endpoint, s3_bucket, s3_options, monkeypatch):
    """Red team #14 G3: the 412 S3 answers when the copied object changed since it was measured
    is a ``ComposedSourceError`` naming that object - not a bare ``OSError`` - and leaves nothing."""
    from streaming_exactly_once.errors import ComposedSourceError

    storage = _direct(s3_bucket, s3_options)
    storage.put_if_absent("log/9.compact", BIG)
    sent = _refusing_the_copy(storage, monkeypatch)
    with pytest.raises(ComposedSourceError, match="log/9.compact") as error:
        composed_files(storage).put_composed_if_absent("log/19.compact", [ByteRange("log/9.compact", 0, len(BIG)), b"\n{}"])
    assert sent and sent[0] and "changed while it was being copied" in str(error.value)
    assert not storage.exists("log/19.compact")
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_a_compaction_whose_source_changed_stops_with_the_named_error(moto_endpoint, s3_bucket, s3_options, monkeypatch):
    """The compaction does not read whatever is there instead: a compact file is written once,
    so a changed one means something else writes the log (``storage.s3._source_changed``). The
    writer stops with the file's name, nothing is published, and once the file is no longer
    vouched for (its index records its size and mtime) the compaction reads and checks it."""
    from streaming_exactly_once.errors import ComposedSourceError
    from streaming_exactly_once.log.codec import DictCodec
    from streaming_exactly_once.log.compactible_log import CompactibleLog

    storage = _direct(s3_bucket, s3_options)
    log = CompactibleLog(storage, "c", DictCodec(), default_interval=4)
    log.copy_vouched = lambda batch_id: True  # as the manifest does for a file with a matching index
    storage.put_if_absent("c/3.compact", BIG)
    log._note(3)
    for i in range(4, 7):
        log.add(i, [{"id": i}])
    _refusing_the_copy(storage, monkeypatch)
    with pytest.raises(ComposedSourceError, match="c/3.compact"):
        log.add(7, [{"id": 7}])
    assert not storage.exists("c/7.compact") and _pending_uploads(s3_options, s3_bucket) == []
    log.copy_vouched = lambda batch_id: False  # the restarted writer: the changed file's index no longer matches
    assert log.add(7, [{"id": 7}]) is True
    assert storage.read_bytes("c/7.compact") == BIG + b'\n{"id":4}\n{"id":5}\n{"id":6}\n{"id":7}'


# -- the next compact file begun in the background (ComposedUploads, CompactionPreparation) ------


def _compacting_logs(s3_storage, memory_storage, *, seed=None):
    """The same concatenating log on S3 (server-side copies on) and in memory, with a large
    compact file 3 that the S3 log vouches for (as the manifest does with a matching index).
    ``seed``: the storage that writes the S3 copy of file 3 (a proxy forwards small bodies only)."""
    from streaming_exactly_once.log.codec import DictCodec
    from streaming_exactly_once.log.compactible_log import CompactibleLog

    (seed or s3_storage).put_if_absent("c/3.compact", BIG)
    memory_storage.put_if_absent("c/3.compact", BIG)
    logs = [CompactibleLog(st, "c", DictCodec(), default_interval=4) for st in (s3_storage, memory_storage)]
    for log in logs:
        log.copy_vouched = lambda batch_id: True
        log._note(3)
    return logs


def _prepared_up_to_7(s3, memory_storage):
    """``_compacting_logs`` with deltas 4-6 in both, and compact file 7 begun on S3."""
    logs = _compacting_logs(s3, memory_storage)
    for i in range(4, 7):
        for log in logs:
            log.add(i, [{"id": i}])
    preparation_of(logs[0]).advance()
    return logs


def test_the_next_compaction_is_begun_in_the_background_and_its_batch_sends_only_the_tail(moto_endpoint, s3_bucket, s3_options, memory_storage):
    """#14 goal 3 on S3: after compact file 3, the preparation begins compact file 7 as an upload
    whose first part the server copies from 3; batch 7 then sends the deltas and its own records
    as the last part and completes it. Its bytes are the streamed log's, and the compaction batch
    itself copies nothing."""
    with S3Proxy(moto_endpoint, strip=False) as proxy:
        s3 = _through(proxy, s3_bucket, s3_options)
        logs = _compacting_logs(s3, memory_storage, seed=_direct(s3_bucket, s3_options))
        for i in range(4, 7):
            for log in logs:
                log.add(i, [{"id": i, "u": uuid.UUID(int=i).hex}])
            preparation_of(logs[0]).advance()
        assert preparation_of(logs[0]).holds(7)
        assert [q for m, q in _own_requests(proxy, "7.compact") if "partNumber=1" in q], "the server copies before the batch"
        proxy.sent.clear()
        for log in logs:
            log.add(7, [{"id": 7}])
        batch = _own_requests(proxy, "7.compact")
        assert [m for m, q in batch if "partNumber" in q] == ["PUT"]  # the tail part only
        assert not [q for m, q in batch if "partNumber=1" in q]
        assert _own_requests(proxy, "3.compact") == [("HEAD", "")]  # only measured again: unchanged since its copy
    assert s3.read_bytes("c/7.compact") == memory_storage.read_bytes("c/7.compact")
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_a_begun_upload_loses_to_a_file_already_there_and_is_aborted(moto_endpoint, s3_bucket, s3_options, memory_storage):
    s3 = _direct(s3_bucket, s3_options)
    logs = _prepared_up_to_7(s3, memory_storage)
    assert preparation_of(logs[0]).holds(7)
    logs[1].add(7, [{"id": 7}])
    theirs = memory_storage.read_bytes("c/7.compact")
    s3.put_if_absent("c/7.compact", theirs)  # another writer's, the very same bytes
    assert logs[0].add(7, [{"id": 7}]) is False  # compared, not replaced
    assert s3.read_bytes("c/7.compact") == theirs
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_closing_or_reopening_aborts_the_begun_upload(moto_endpoint, s3_bucket, s3_options, memory_storage):
    s3 = _direct(s3_bucket, s3_options)
    log = _compacting_logs(s3, memory_storage)[0]
    log.add(4, [{"id": 4}])
    preparation_of(log).advance()
    assert [u["Key"] for u in _pending_uploads(s3_options, s3_bucket)] == ["root/c/7.compact"]
    preparation_of(log).discard()
    assert _pending_uploads(s3_options, s3_bucket) == []
    preparation_of(log).advance()
    assert _pending_uploads(s3_options, s3_bucket)
    preparation_of(log).discard_all()
    assert _pending_uploads(s3_options, s3_bucket) == []
    for i in range(5, 8):
        log.add(i, [{"id": i}])  # built by its batch: nothing prepared
    assert s3.read_bytes("c/7.compact").startswith(BIG)


_PREPARING_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from streaming_exactly_once.log.codec import DictCodec
from streaming_exactly_once.log.compactible_log import CompactibleLog
from streaming_exactly_once.commit.background.compaction_preparation import preparation_of
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.commit.background.compaction_preparation import preparation_of
storage = open_storage({root!r}, {{**{options!r}, 'seo_server_side_copy': True}})
log = CompactibleLog(storage, "c", DictCodec(), default_interval=4)
log.copy_vouched = lambda batch_id: True
log.add(4, [{{"id": 4}}])
preparation_of(log).advance()
print("prepared", flush=True)
sys.stdin.read()
"""


def test_a_writer_killed_with_its_upload_begun_leaves_nothing_and_the_next_one_compacts(moto_endpoint, s3_bucket, s3_options, memory_storage):
    """kill -9 of a writer whose next compact file is begun (the server copied the previous
    one): nothing is visible, and the next writer - which begins its own - writes compact file
    7 with the bytes of the streamed log."""
    s3 = _direct(s3_bucket, s3_options)
    s3.put_if_absent("c/3.compact", BIG)
    repo = str(Path(__file__).resolve().parents[2])
    source = _PREPARING_CHILD.format(repo=repo, root=f"s3://{s3_bucket}/root", options=s3_options)
    child = subprocess.Popen(
        [sys.executable, "-c", source], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": repo}
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "prepared"
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    assert [u["Key"] for u in _pending_uploads(s3_options, s3_bucket)] == ["root/c/7.compact"]  # invisible
    assert not s3.exists("c/7.compact")
    from streaming_exactly_once.log.codec import DictCodec
    from streaming_exactly_once.log.compactible_log import CompactibleLog

    successor = CompactibleLog(s3, "c", DictCodec(), default_interval=4)
    successor.copy_vouched = lambda batch_id: True
    twin = CompactibleLog(memory_storage, "c", DictCodec(), default_interval=4)
    memory_storage.put_if_absent("c/3.compact", BIG)
    twin._note(3)
    twin.add(4, [{"id": 4}])
    preparation_of(successor).advance()
    for i in range(5, 8):
        for log in (successor, twin):
            log.add(i, [{"id": i}])
        preparation_of(successor).advance()
    assert s3.read_bytes("c/7.compact") == memory_storage.read_bytes("c/7.compact")
    # the killed writer's (invisible; a lifecycle rule removes it) and the successor's next one
    assert sorted(u["Key"] for u in _pending_uploads(s3_options, s3_bucket)) == ["root/c/11.compact", "root/c/7.compact"]


def test_an_upload_gone_before_its_batch_leaves_the_file_to_the_batch(moto_endpoint, s3_bucket, s3_options, memory_storage):
    """Red team: a bucket's lifecycle rule for incomplete uploads (or an admin) may remove the
    begun upload while the compaction is far off. The batch then builds the file itself."""
    s3 = _direct(s3_bucket, s3_options)
    logs = _prepared_up_to_7(s3, memory_storage)
    [pending] = _pending_uploads(s3_options, s3_bucket)
    _client(s3_options).abort_multipart_upload(Bucket=s3_bucket, Key=pending["Key"], UploadId=pending["UploadId"])
    for log in logs:
        assert log.add(7, [{"id": 7}]) is True
    assert s3.read_bytes("c/7.compact") == memory_storage.read_bytes("c/7.compact")
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_a_compact_file_changed_after_the_copy_is_measured_again_by_the_batch(moto_endpoint, s3_bucket, s3_options, memory_storage):
    """Red team: the copy was begun long before the batch. If the compact file it copied has
    changed since (something outside the writer rewrote it), the new file must not start with
    the old bytes: the upload is abandoned and the batch builds the file from the file as it is
    now (here still vouched for by the test; the manifest's index would refuse it)."""
    s3 = _direct(s3_bucket, s3_options)
    logs = _prepared_up_to_7(s3, memory_storage)
    assert preparation_of(logs[0]).holds(7)
    changed = BIG.replace(b"part-00000001", b"part-99999999")
    _client(s3_options).put_object(Bucket=s3_bucket, Key="root/c/3.compact", Body=changed)
    assert logs[0].add(7, [{"id": 7}]) is True
    assert s3.read_bytes("c/7.compact").startswith(changed)
    assert _pending_uploads(s3_options, s3_bucket) == []
