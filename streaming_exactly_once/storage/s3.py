"""S3 (and S3-compatible) storage: conditional PUT for exclusive create, no atomic rename.

``put_if_absent`` is one ``PutObject`` with ``If-None-Match: *`` (S3 arbitrates: exactly one of
concurrent creates wins, the rest get ``FileExistsError``); ``rename`` is copy + delete, so the
sink defaults to the rename-free ``direct`` mode here. ``check_exclusive_create`` probes once per
endpoint and bucket that the service honours the condition. ``put_composed_if_absent`` and the
``begin/complete/abort_composed`` halves build a ``.compact`` file with server-side copies in
one conditional multipart upload - off unless ``"seo_server_side_copy": True``, since its
exclusivity is the store's. ``docs/design/storage.md`` has the details and why.

URIs ``s3://``, ``s3a://`` and ``s3n://`` all map to s3fs; the scheme the user gave is kept in
``root_uri`` so that manifest entries carry the scheme their Spark readers use.
"""

from __future__ import annotations

import contextlib
import errno
import posixpath
import threading
import time
import uuid
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import ComposedSourceError, StorageAccessError, UnsupportedStorageError
from .base import ByteRange, PendingUpload, Piece, check_relative
from .fsspec_store import FsspecStorage, error_chain
from .probe import exclusive_create_problem

_SINGLE_PUT_LIMIT = 5 * 1024**3
#: The storage option that turns on composed files by server-side copy (module docstring).
SERVER_SIDE_COPY = "seo_server_side_copy"
#: S3's smallest part (every part of a multipart upload but the last) and largest copied part.
_MIN_PART = 5 * 1024**2
_MAX_PART = 5 * 1024**3

#: Per (endpoint, bucket): whether a second conditional CompleteMultipartUpload is refused.
_CONDITIONAL_COMPLETE: dict[Hashable, bool] = {}
_CONDITIONAL_COMPLETE_LOCK = threading.Lock()


_COMPLETE_ATTEMPTS = 4


#: S3's answers that mean the credentials are wrong or lack the right to the bucket.
_CREDENTIAL_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken", "403"})
_CREDENTIALS_HINT = (
    "Pass key and secret in storage_options, set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or configure a profile or an instance role"
)


def _error_code(exc: BaseException) -> str | None:
    """S3's error code of a botocore ``ClientError`` (None for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return None if code is None else str(code)
    return None


def _conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is S3's 409 ``ConditionalRequestConflict``: a conditional write of the same
    key was in flight; the request may be retried, and then gets 412 if the other one won."""
    for link in error_chain(exc):
        response = getattr(link, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") == "ConditionalRequestConflict":
            return True
    return False


def _precondition_failed(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is the service's 412 to a conditional request."""
    for link in error_chain(exc):
        if isinstance(link, FileExistsError):
            return True
        response = getattr(link, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "412") or status == 412:
                return True
    return False


def _source_changed(
    source: str, target: str, etag: str, *, seen: str = "S3 answered 412 PreconditionFailed to UploadPartCopy"
) -> ComposedSourceError:
    """The service's 412 to ``UploadPartCopy`` with ``CopySourceIfMatch``: the source object is
    no longer the one measured when the copy began.

    Not retried, and not worked around by reading whatever is there now: the sources are
    ``.compact`` files, written once and never changed, so a change means something other than
    this writer modified the table's log, and whatever the compaction copied next would be bytes
    nobody checked - the object the copy was vouched for (``CompactibleLog.compact_range``) is
    gone. Nothing was created (the upload is aborted). When the writer starts again, the changed
    file no longer matches what vouched for it (its index records the size and modification
    time), so the compaction reads it and checks every line instead of copying it."""
    return ComposedSourceError(
        f"{source} changed while it was being copied into {target}: {seen}, the object no longer has the "
        f"ETag {etag} it had when the copy began. A compact "
        "file is written once and never changed, so something other than this writer modified the table's "
        "log; nothing was written. Find what modifies it (another writer or tool, a bucket replication or "
        "restore), run `seo verify <table>`, then restart the query: the changed file is then read and "
        "checked line by line instead of being copied."
    )


@dataclass(frozen=True)
class _Upload:
    """``PendingUpload.token`` on S3: where the upload goes, its id and the parts copied so far."""

    bucket: str
    key: str
    upload_id: str
    parts: list[dict[str, Any]]
    #: the copied object's ETag when it was copied ("" if the service gave none)
    source_etag: str = ""


class S3Storage(FsspecStorage):
    """Storage on S3 or an S3-compatible object store, through s3fs."""

    rename_is_atomic = False

    def __init__(self, root_uri: str, options: dict[str, Any] | None = None) -> None:
        parts = urlsplit(root_uri)
        if not parts.netloc:
            raise ValueError(f"S3 URI {root_uri!r} has no bucket; use s3://bucket/prefix")
        native = (parts.netloc + "/" + parts.path.strip("/")).rstrip("/")
        own = dict(options or {})
        #: composed files by server-side copy: only where asked for (module docstring)
        self.supports_composed_files = bool(own.pop(SERVER_SIDE_COPY, False))
        super().__init__(f"{parts.scheme}://{native}", native, own)

    def put_if_absent(self, path: str, data: bytes) -> None:
        data = bytes(data)
        if len(data) >= _SINGLE_PUT_LIMIT:
            raise ValueError(f"put_if_absent of {len(data)} bytes exceeds the single-PUT limit")
        try:
            with self._errors(path):
                self._fs.pipe_file(self._native(path), data, mode="create", chunksize=_SINGLE_PUT_LIMIT)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "object exists", self.uri(path)) from None

    def _access_error(self, exc: BaseException, path: str) -> StorageAccessError | None:
        """No credentials at all (botocore looked in storage_options, the environment, the shared
        files and the instance metadata), credentials S3 refuses, or a missing bucket."""
        bucket = self._native_root.split("/", 1)[0]
        for cause in error_chain(exc):
            name = type(cause).__name__
            if name in ("NoCredentialsError", "PartialCredentialsError"):
                return StorageAccessError(
                    uri=self.uri(path),
                    reason="credentials",
                    detail=f"no AWS credentials were found ({name}: {cause})",
                    hint=_CREDENTIALS_HINT,
                    table=self.root_uri,
                )
            code = _error_code(cause)
            if code in _CREDENTIAL_CODES or (isinstance(cause, PermissionError) and code is None):
                return StorageAccessError(
                    uri=self.uri(path),
                    reason="credentials",
                    detail=f"S3 refused the request ({code or cause})",
                    hint=_CREDENTIALS_HINT + "; or grant them access to this bucket and prefix",
                    table=self.root_uri,
                )
            if code == "NoSuchBucket":
                return StorageAccessError(
                    uri=self.uri(path),
                    reason="container",
                    detail=f"bucket {bucket!r} does not exist",
                    hint="Create the bucket (or fix its name in the URI) and try again",
                    table=self.root_uri,
                )
        return None

    # -- ComposedFiles (storage.base) --------------------------------------------------------

    supports_composed_files = False  # per object: ``SERVER_SIDE_COPY``

    def _store_key(self) -> tuple[str, str, str]:
        return ("s3", str(self._fs.connect().meta.endpoint_url), self._native_root.split("/", 1)[0])

    def put_composed_if_absent(self, path: str, pieces: Sequence[Piece]) -> None:
        first = pieces[0] if pieces else None
        tail = pieces[1:]
        upload = None
        if isinstance(first, ByteRange) and not any(isinstance(p, ByteRange) for p in tail):
            upload = self.begin_composed(path, first)
        if upload is None:
            self.put_if_absent(path, b"".join(self._gathered(pieces)))  # today's single conditional PUT
            return
        # just copied, under the ETag guard: nothing to measure again
        self._complete(upload, b"".join(p for p in tail if not isinstance(p, ByteRange)))

    def _gathered(self, pieces: Sequence[Piece]) -> list[bytes]:
        """The bytes of ``pieces``, ranges read with ranged GETs."""
        out = []
        for piece in pieces:
            if isinstance(piece, ByteRange):
                data = self._fs.cat_file(self._native(piece.path), start=piece.offset, end=piece.offset + piece.length) if piece.length else b""
                if len(data) != piece.length:
                    raise ComposedSourceError(f"{self.uri(piece.path)} ended {piece.length - len(data)} bytes short of the range to copy")
                out.append(data)
            else:
                out.append(bytes(piece))
        return out

    # -- ComposedUploads (storage.base): the same upload in two halves -----------------------

    @property
    def supports_composed_uploads(self) -> bool:  # type: ignore[override]
        return self.supports_composed_files

    def begin_composed(self, path: str, source: ByteRange) -> PendingUpload | None:
        """A multipart upload of ``path`` whose first parts the service copies from ``source``
        (``UploadPartCopy``, guarded by the ETag measured here). None: below S3's 5 MiB part
        minimum, or an endpoint that does not refuse a second conditional completion."""
        if source.length < _MIN_PART or not self.conditional_complete_works(posixpath.dirname(check_relative(path))):
            return None
        bucket, key = self._native(path).split("/", 1)
        src_bucket, src_key = self._native(source.path).split("/", 1)
        with self._errors(source.path):
            info = self._fs.info(self._native(source.path))  # FileNotFoundError if it is gone
        if int(info.get("size") or 0) < source.offset + source.length:
            raise ComposedSourceError(f"{self.uri(source.path)} is shorter than the range to copy")
        etag = info.get("ETag")
        call = self._fs.call_s3
        with self._errors(path):
            upload_id = call("create_multipart_upload", Bucket=bucket, Key=key)["UploadId"]
        token = _Upload(bucket, key, upload_id, [], str(etag or ""))
        try:
            count = -(-source.length // _MAX_PART)
            size = -(-source.length // count)
            for i in range(count):
                start = source.offset + i * size
                end = min(source.offset + source.length, start + size) - 1
                extra = {"CopySourceIfMatch": etag} if etag else {}  # the very object just measured
                try:
                    answer = call(
                        "upload_part_copy",
                        Bucket=bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=i + 1,
                        CopySource={"Bucket": src_bucket, "Key": src_key},
                        CopySourceRange=f"bytes={start}-{end}",
                        **extra,
                    )
                except Exception as exc:
                    if etag and _precondition_failed(exc):
                        raise _source_changed(self.uri(source.path), self.uri(path), etag) from None
                    raise
                token.parts.append({"PartNumber": i + 1, "ETag": answer["CopyPartResult"]["ETag"]})
        except BaseException:
            self._abort(token)  # nothing left behind: an aborted upload holds no parts
            raise
        return PendingUpload(path, source, token)

    def complete_composed(self, upload: PendingUpload, tail: bytes) -> None:
        """``_complete``, once the source is measured again: begun in the background, maybe long
        before, the file copied must still be the one copied, or the new file would not start
        with it as it is now."""
        token = upload.token
        assert isinstance(token, _Upload)
        if token.source_etag:
            try:
                with self._errors(upload.source.path):
                    now = str(self._fs.info(self._native(upload.source.path)).get("ETag") or "")
                if now != token.source_etag:
                    raise _source_changed(
                        self.uri(upload.source.path), self.uri(upload.path), token.source_etag, seen="it was measured again before completing"
                    )
            except BaseException:
                self._abort(token)
                raise
        self._complete(upload, tail)

    def _complete(self, upload: PendingUpload, tail: bytes) -> None:
        """Send ``tail`` as the last part and complete the upload with ``If-None-Match: *``."""
        token = upload.token
        assert isinstance(token, _Upload)
        call = self._fs.call_s3
        parts = list(token.parts)
        try:
            if tail:
                number = len(parts) + 1
                answer = call("upload_part", Bucket=token.bucket, Key=token.key, UploadId=token.upload_id, PartNumber=number, Body=tail)
                parts.append({"PartNumber": number, "ETag": answer["ETag"]})
            for attempt in range(_COMPLETE_ATTEMPTS):
                try:
                    call(
                        "complete_multipart_upload",
                        Bucket=token.bucket,
                        Key=token.key,
                        UploadId=token.upload_id,
                        MultipartUpload={"Parts": parts},
                        IfNoneMatch="*",
                    )
                    break
                except Exception as exc:
                    if _precondition_failed(exc):
                        raise FileExistsError(errno.EEXIST, "object exists", self.uri(upload.path)) from None
                    if not _conflict(exc) or attempt + 1 == _COMPLETE_ATTEMPTS:
                        raise
                    time.sleep(0.05 * (attempt + 1))  # another conditional write in flight: S3 says retry
        except BaseException:
            self._abort(token)
            raise

    def abort_composed(self, upload: PendingUpload) -> None:
        token = upload.token
        assert isinstance(token, _Upload)
        self._abort(token)

    def _abort(self, token: _Upload) -> None:
        with contextlib.suppress(Exception):  # best effort: one left behind is invisible
            self._fs.call_s3("abort_multipart_upload", Bucket=token.bucket, Key=token.key, UploadId=token.upload_id)

    def conditional_complete_works(self, probe_dir: str) -> bool:
        """Whether this endpoint refuses a second ``CompleteMultipartUpload`` with
        ``If-None-Match: *``, probed once per process, endpoint and bucket with a one-part
        upload under ``probe_dir`` (removed afterwards). An endpoint that completes the second
        one - or fails the probe in any other way - is simply not used for copies: composed
        files then take the single conditional PUT, whose exclusivity ``check_exclusive_create``
        proves."""
        key = self._store_key()
        with _CONDITIONAL_COMPLETE_LOCK:
            if key not in _CONDITIONAL_COMPLETE:
                _CONDITIONAL_COMPLETE[key] = self._probe_conditional_complete(posixpath.join(probe_dir, f".seo-probe-{uuid.uuid4().hex}"))
            return _CONDITIONAL_COMPLETE[key]

    def _probe_conditional_complete(self, path: str) -> bool:
        bucket, key = self._native(path).split("/", 1)
        call = self._fs.call_s3
        outcomes = []
        try:
            for body in (b"first", b"second"):
                upload = call("create_multipart_upload", Bucket=bucket, Key=key)["UploadId"]
                try:
                    etag = call("upload_part", Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=body)["ETag"]
                    call(
                        "complete_multipart_upload",
                        Bucket=bucket,
                        Key=key,
                        UploadId=upload,
                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
                        IfNoneMatch="*",
                    )
                    outcomes.append("created")
                except Exception as exc:
                    outcomes.append("refused" if _precondition_failed(exc) else "failed")
                    with contextlib.suppress(Exception):
                        call("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload)
        except Exception:
            return False
        finally:
            with contextlib.suppress(Exception):
                self._fs.rm_file(self._native(path))
        return outcomes == ["created", "refused"]

    def rename(self, src: str, dst: str) -> None:
        s, d = self._native(src), self._native(dst)
        with self._errors(dst):
            if self._fs.exists(d):
                raise FileExistsError(errno.EEXIST, "rename target exists", self.uri(dst))
            self._fs.copy(s, d)
            self._fs.rm_file(s)

    def check_exclusive_create(self, probe_dir: str) -> None:
        """Create ``<probe_dir>/<uuid>`` twice; the second create must fail (see ``Storage``).
        Then settles, once, whether composed files may use a conditional multipart upload."""
        endpoint = self._fs.connect().meta.endpoint_url
        bucket = self._native_root.split("/", 1)[0]
        with self._errors(probe_dir):
            problem = exclusive_create_problem(self, ("s3", endpoint, bucket), probe_dir)
        if problem is not None:
            raise UnsupportedStorageError(
                f"S3 endpoint {endpoint} (bucket {bucket}) does not honour conditional writes: {problem} "
                "Without an exclusive create-if-absent, two writers could both commit the same batch and a fenced "
                "writer would not be stopped. Use an S3 service or version that supports PutObject with "
                "'If-None-Match: *' (answering 412 Precondition Failed when the key exists), or a filesystem "
                "path; then restart the job.",
                endpoint=endpoint,
                bucket=bucket,
            )
        self.conditional_complete_works(probe_dir)
