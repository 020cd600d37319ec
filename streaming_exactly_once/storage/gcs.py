"""Google Cloud Storage (``gs://``, ``gcs://``) through gcsfs.

* ``put_if_absent`` is ONE multipart upload (``uploadType=multipart``) with the precondition
  ``ifGenerationMatch=0`` ("only if no live object has this name"), through gcsfs
  ``pipe_file(mode="create")``. GCS arbitrates: one concurrent writer gets 200, the rest
  ``412 Precondition Failed`` -> ``FileExistsError``; the object appears whole or not at all.
  The payload is always sent as a single request (``chunksize`` above its size), never as a
  resumable upload: the precondition of a resumable upload is checked only when it is
  finalised, and the emulator we test against ignores it there, so that path is unproven.
* ``rename`` reads the source and creates the target with the same conditional upload, then
  deletes the source. It never overwrites and uses only the primitive the tests prove, but it
  moves the bytes through this process (O(size), not atomic), so ``direct`` staging - no
  renames at all - is the default here. gcsfs's own ``mv`` (``moveTo``, falling back to
  ``rewriteTo``) sends no precondition and would overwrite.
* The core ``gcsfs.core.GCSFileSystem`` class is used, not the default
  ``ExtendedGcsFileSystem``: the latter first asks the gRPC Storage Control API for the
  bucket's layout (zonal/HNS buckets), which against anything but Google costs a minute per
  call. The objects API used here works on hierarchical-namespace buckets too.
* A 401/403 or a missing bucket becomes one ``StorageAccessError`` naming the URI (gcsfs
  reports a missing bucket as ``FileNotFoundError`` of a request URL, like a missing object).
"""

from __future__ import annotations

import errno
from typing import Any
from urllib.parse import urlsplit

from .. import extras
from ..errors import StorageAccessError, UnsupportedStorageError
from .fsspec_store import FsspecStorage, error_chain
from .probe import exclusive_create_problem

SCHEMES = ("gs", "gcs")

#: gcsfs's default chunk size: smaller payloads already go as one multipart upload.
_GCSFS_CHUNK = 50 * 2**20
#: The largest payload sent as one request (the service accepts up to 5 TiB per object; this
#: bounds memory, since the whole body is built in memory).
SINGLE_REQUEST_LIMIT = 5 * 2**30


class GcsStorage(FsspecStorage):
    """Storage in one GCS bucket, through gcsfs."""

    rename_is_atomic = False

    def __init__(self, root_uri: str, options: dict[str, Any] | None = None) -> None:
        parts = urlsplit(root_uri)
        if not parts.netloc:
            raise ValueError(f"GCS URI {root_uri!r} has no bucket; use gs://bucket/path")
        self._bucket = parts.netloc
        self._known: dict[str, bool] = {}  # shared with children: facts proven once (bucket exists)
        native = (parts.netloc + "/" + parts.path.strip("/")).rstrip("/")
        super().__init__(f"{parts.scheme.lower()}://{native}", native, options)

    def _make_filesystem(self) -> Any:
        extras.require_storage(self.root_uri)
        import gcsfs.core

        kwargs = dict(self._options)
        kwargs.setdefault("use_listings_cache", False)
        return gcsfs.core.GCSFileSystem(**kwargs)

    # -- the two exclusive primitives --------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> None:
        data = bytes(data)
        if len(data) >= SINGLE_REQUEST_LIMIT:
            raise ValueError(f"put_if_absent of {len(data)} bytes exceeds the single-request limit")
        try:
            with self._errors(path):
                self._fs.pipe_file(self._native(path), data, mode="create", chunksize=max(_GCSFS_CHUNK, len(data) + 1))
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "object exists", self.uri(path)) from None

    def rename(self, src: str, dst: str) -> None:
        try:
            data = self.read_bytes(src)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "rename source missing", self.uri(src)) from None
        self.put_if_absent(dst, data)
        self.delete(src)

    # -- probe and errors --------------------------------------------------------------------

    def _endpoint(self) -> str:
        return str(getattr(self._fs, "_location", None) or "https://storage.googleapis.com").rstrip("/")

    def check_exclusive_create(self, probe_dir: str) -> None:
        endpoint = self._endpoint()
        problem = exclusive_create_problem(self, ("gcs", endpoint, self._bucket), probe_dir)
        if problem is not None:
            raise UnsupportedStorageError(
                f"GCS endpoint {endpoint} (bucket {self._bucket}) does not honour the ifGenerationMatch=0 "
                f"precondition: {problem} Without it two writers could both commit the same batch. Use Google "
                "Cloud Storage or an emulator that answers 412 to a create of an existing object.",
                endpoint=endpoint,
                bucket=self._bucket,
            )

    def _access_error(self, exc: BaseException, path: str) -> StorageAccessError | None:
        for cause in error_chain(exc):
            code = getattr(cause, "code", None)
            forbidden = type(cause) is OSError and str(cause).startswith("Forbidden")
            if forbidden or (type(cause).__name__ == "HttpError" and code in (401, 403)):
                first = str(cause).strip().splitlines()
                return StorageAccessError(
                    uri=self.uri(path),
                    reason="credentials",
                    detail=f"GCS refused the credentials ({code or 403}{': ' + first[-1] if first else ''})",
                    hint="Check the token / service-account credentials and project in storage_options.",
                )
        if isinstance(exc, FileNotFoundError) and not self._bucket_exists():
            return StorageAccessError(
                uri=self.uri(path),
                reason="container",
                detail=f"bucket {self._bucket!r} does not exist",
                hint="Create the bucket (or fix its name in the URI) and try again.",
            )
        return None

    def _bucket_exists(self) -> bool:
        """Once true, remembered (the bucket of a live table is not expected to vanish)."""
        if not self._known.get("bucket"):
            try:
                self._fs.info(self._bucket)
            except FileNotFoundError:
                return False
            except Exception:
                return True  # cannot tell: let the original error through
            self._known["bucket"] = True
        return True
