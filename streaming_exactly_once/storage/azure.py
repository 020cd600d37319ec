"""Azure Blob Storage and ADLS Gen2 (``az://``, ``abfs://``, ``abfss://``) through adlfs.

* ``put_if_absent`` is one upload with ``If-None-Match: *`` (adlfs ``pipe_file(mode="create")``,
  i.e. ``upload_blob(overwrite=False)``): a single Put Blob, or for large payloads staged blocks
  and one conditional Put Block List. The service arbitrates, so of concurrent writers exactly
  one wins and the others get 409 ``BlobAlreadyExists`` (or 412) -> ``FileExistsError``; the
  blob appears whole or not at all. adlfs's generic ``open("xb")`` is not used: it reports a
  412 as ``RuntimeError``.
* ``rename`` is a server-side copy with a destination condition (``If-None-Match: *``) and a
  source condition (the source's ETag), then a delete guarded by the same ETag. Never
  overwrites, but it is not atomic (both names exist for a moment; a crash in between leaves
  both), which is why the default staging mode here is ``direct``. On an account with a
  hierarchical namespace the blob API is used too (adlfs never calls the dfs endpoint).
* A rejected credential (401/403) or a missing container becomes one ``StorageAccessError``
  naming the URI, instead of the SDK's exception (or adlfs's ``FileNotFoundError`` for a path
  in a container that does not exist).

URIs: ``az://container/path``, ``abfs[s]://container/path`` and Hadoop's
``abfs[s]://container@account.dfs.core.windows.net/path`` (the account then comes from the
host unless the options name one). The spelling given is kept in ``root_uri``, so manifest
entries carry the URIs Spark on the cluster uses.
"""

from __future__ import annotations

import asyncio
import errno
import time
from typing import Any
from urllib.parse import urlsplit

from .. import extras
from ..errors import StorageAccessError, StorageError, UnsupportedStorageError
from .fsspec_store import FsspecStorage, error_chain
from .probe import exclusive_create_problem

SCHEMES = ("az", "abfs", "abfss")

#: How long a server-side copy may stay ``pending`` before ``rename`` gives up.
COPY_TIMEOUT_S = 600.0


class AzureStorage(FsspecStorage):
    """Storage in one Azure Blob container, through adlfs and azure-storage-blob."""

    rename_is_atomic = False

    def __init__(self, root_uri: str, options: dict[str, Any] | None = None) -> None:
        parts = urlsplit(root_uri)
        container, _, host = parts.netloc.partition("@")
        if not container:
            raise ValueError(f"Azure URI {root_uri!r} has no container; use az://container/path")
        opts = dict(options or {})
        account = host.split(".", 1)[0] if host else ""
        if account and not any(k in opts for k in ("account_name", "connection_string")):
            opts["account_name"] = account
        native = (container + "/" + parts.path.strip("/")).rstrip("/")
        self._container = container
        self._known: dict[str, bool] = {}  # shared with children: facts proven once (container exists)
        super().__init__(f"{parts.scheme.lower()}://{parts.netloc}/{parts.path.strip('/')}".rstrip("/"), native, opts)

    def _make_filesystem(self) -> Any:
        extras.require_storage(self.root_uri)
        import adlfs

        kwargs = dict(self._options)
        kwargs.setdefault("use_listings_cache", False)
        return adlfs.AzureBlobFileSystem(**kwargs)

    # -- the two exclusive primitives --------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> None:
        from azure.core.exceptions import ResourceModifiedError

        try:
            with self._errors(path):
                self._fs.pipe_file(self._native(path), bytes(data), mode="create")
        except (FileExistsError, ResourceModifiedError):
            raise FileExistsError(errno.EEXIST, "blob exists", self.uri(path)) from None

    def rename(self, src: str, dst: str) -> None:
        from fsspec.asyn import sync

        with self._errors(src):
            sync(self._fs.loop, self._copy_then_delete, src, dst)

    async def _copy_then_delete(self, src: str, dst: str) -> None:
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

        client = self._fs.service_client
        s_container, s_blob, _ = self._fs.split_path(self._native(src))
        d_container, d_blob, _ = self._fs.split_path(self._native(dst))
        async with client.get_blob_client(s_container, s_blob) as source, client.get_blob_client(d_container, d_blob) as target:
            try:
                etag = (await source.get_blob_properties()).etag
            except ResourceNotFoundError:
                raise FileNotFoundError(errno.ENOENT, "rename source missing", self.uri(src)) from None
            try:
                started = await target.start_copy_from_url(
                    source.url,
                    match_condition=MatchConditions.IfMissing,
                    source_etag=etag,
                    source_match_condition=MatchConditions.IfNotModified,
                )
            except ResourceExistsError:
                raise FileExistsError(errno.EEXIST, "rename target exists", self.uri(dst)) from None
            status, deadline = started.get("copy_status"), time.monotonic() + COPY_TIMEOUT_S
            while status == "pending" and time.monotonic() < deadline:  # large or cross-account copies
                await asyncio.sleep(0.2)
                status = (await target.get_blob_properties()).copy.status
            if status != "success":
                raise StorageError(f"Copying {self.uri(src)} to {self.uri(dst)} ended with status {status!r}.", uri=self.uri(dst))
            await source.delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)

    # -- probe and errors --------------------------------------------------------------------

    def check_exclusive_create(self, probe_dir: str) -> None:
        endpoint = self._fs.service_client.url.rstrip("/")
        problem = exclusive_create_problem(self, ("azure", endpoint, self._container), probe_dir)
        if problem is not None:
            raise UnsupportedStorageError(
                f"Azure endpoint {endpoint} (container {self._container}) does not honour conditional writes: "
                f"{problem} Without 'If-None-Match: *' two writers could both commit the same batch. Use Azure "
                "Storage or an emulator version that answers 409/412 to a create of an existing blob.",
                endpoint=endpoint,
                container=self._container,
            )

    def _access_error(self, exc: BaseException, path: str) -> StorageAccessError | None:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        for cause in error_chain(exc):
            if isinstance(cause, HttpResponseError) and cause.status_code in (401, 403):
                return StorageAccessError(
                    uri=self.uri(path),
                    reason="credentials",
                    detail=f"Azure refused the credentials ({cause.status_code} {_error_code(cause) or cause.reason})",
                    hint="Check the account name and key, SAS token or connection string in storage_options.",
                )
            if isinstance(cause, ResourceNotFoundError) and str(_error_code(cause) or "") == "ContainerNotFound":
                return self._no_container(path)
        if isinstance(exc, FileNotFoundError) and not self._container_exists():
            return self._no_container(path)
        return None

    def _no_container(self, path: str) -> StorageAccessError:
        return StorageAccessError(
            uri=self.uri(path),
            reason="container",
            detail=f"container {self._container!r} does not exist in this storage account",
            hint="Create the container (or fix its name in the URI) and try again.",
        )

    def _container_exists(self) -> bool:
        """Once true, remembered (containers of a live table are not expected to vanish)."""
        if not self._known.get("container"):
            from fsspec.asyn import sync

            async def exists() -> bool:
                async with self._fs.service_client.get_container_client(self._container) as cc:
                    found: bool = await cc.exists()
                    return found

            try:
                self._known["container"] = sync(self._fs.loop, exists)
            except Exception:
                return True  # cannot tell: let the original error through
        return bool(self._known["container"])


def _error_code(error: BaseException) -> str | None:
    """The storage service's error code: azure-storage-blob sets ``error_code`` on the errors it
    raises; azure-core's own (e.g. from the credential pipeline) have none."""
    code: str | None = getattr(error, "error_code", None)
    return code
