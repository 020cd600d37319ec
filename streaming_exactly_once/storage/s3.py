"""S3 (and S3-compatible) storage: conditional PUT for exclusive create, no atomic rename.

* ``put_if_absent`` is one ``PutObject`` with ``If-None-Match: *`` (s3fs ``mode="create"``):
  S3 itself arbitrates, so of concurrent writers exactly one gets 200 and the rest get
  ``412 Precondition Failed`` -> ``FileExistsError``. PUT is atomic, so no reader sees a
  partial object. Data is sent as a single PUT (up to 5 GiB) because conditional multipart
  completion is not supported by every S3-compatible service.
* ``rename`` is copy + delete: not atomic and O(size). The sink therefore defaults to the
  rename-free ``direct`` staging mode on S3, where the manifest write is the only commit.
* Listing caches are disabled (see ``fsspec_store``).
* Not every S3-compatible service honours ``If-None-Match: *``; one that ignores it answers
  200 to every create, and nothing would show it. ``check_exclusive_create`` proves the
  endpoint once per process (per endpoint and bucket) by creating one probe object twice.

URIs ``s3://``, ``s3a://`` and ``s3n://`` all map to s3fs; the scheme the user gave is kept in
``root_uri`` so that manifest entries carry the scheme their Spark readers use.
"""

from __future__ import annotations

import errno
from typing import Any
from urllib.parse import urlsplit

from ..errors import UnsupportedStorageError
from .fsspec_store import FsspecStorage
from .probe import exclusive_create_problem

_SINGLE_PUT_LIMIT = 5 * 1024**3


class S3Storage(FsspecStorage):
    """Storage on S3 or an S3-compatible object store, through s3fs."""

    rename_is_atomic = False

    def __init__(self, root_uri: str, options: dict[str, Any] | None = None) -> None:
        parts = urlsplit(root_uri)
        if not parts.netloc:
            raise ValueError(f"S3 URI {root_uri!r} has no bucket; use s3://bucket/prefix")
        native = (parts.netloc + "/" + parts.path.strip("/")).rstrip("/")
        super().__init__(f"{parts.scheme}://{native}", native, options)

    def put_if_absent(self, path: str, data: bytes) -> None:
        data = bytes(data)
        if len(data) >= _SINGLE_PUT_LIMIT:
            raise ValueError(f"put_if_absent of {len(data)} bytes exceeds the single-PUT limit")
        try:
            self._fs.pipe_file(self._native(path), data, mode="create", chunksize=_SINGLE_PUT_LIMIT)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "object exists", self.uri(path)) from None

    def rename(self, src: str, dst: str) -> None:
        s, d = self._native(src), self._native(dst)
        if self._fs.exists(d):
            raise FileExistsError(errno.EEXIST, "rename target exists", self.uri(dst))
        self._fs.copy(s, d)
        self._fs.rm_file(s)

    def check_exclusive_create(self, probe_dir: str) -> None:
        """Create ``<probe_dir>/<uuid>`` twice; the second create must fail (see ``Storage``)."""
        endpoint = self._fs.connect().meta.endpoint_url
        bucket = self._native_root.split("/", 1)[0]
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
