"""How the Delta layer reaches delta-rs: the lazily imported ``deltalake`` package, the table URI
delta-rs understands for one of our storages, and the object-store options that go with it.

``deltalake`` is an optional extra (``pip install 'streaming-exactly-once[delta]'``): nothing
imports it until a ``format="delta"`` table is opened, so the sink, the readers and the CLI keep
working without it for every other table.

Why the options are translated here and not passed through: our storage takes s3fs's option
names (``endpoint_url``, ``key``, ``secret``, ``client_kwargs``), delta-rs takes object_store's
(``AWS_ENDPOINT_URL``, ...). One table must be reached by both with the same credentials, so
the user gives them once. ``conditional_put=etag`` makes delta-rs create ``_delta_log/N.json``
with ``If-None-Match: *`` - the primitive our own S3 storage proves per endpoint before any
commit (``Storage.check_exclusive_create``), so no external lock (DynamoDB) is needed.
"""

from __future__ import annotations

from typing import Any

from .. import extras
from ..errors import UnsupportedStorageError
from ..storage.base import Storage

#: Schemes of our storages that delta-rs can write a table on, and the scheme it is given.
_DELTA_SCHEMES = {"file": "file", "s3": "s3", "s3a": "s3", "s3n": "s3"}


def deltalake() -> Any:
    """The ``deltalake`` module, or ``MissingDependencyError`` naming the extra to install."""
    extras.require("delta")
    import deltalake as module

    return module


def table_uri(storage: Storage) -> str:
    """The table root as delta-rs names it: a plain local path, or ``s3://bucket/prefix``."""
    scheme = storage.scheme.lower()
    target = _DELTA_SCHEMES.get(scheme)
    if target is None:
        raise UnsupportedStorageError(
            f"format='delta' needs a local path or an s3:// table; {storage.root_uri} is on {scheme}://, which "
            "delta-rs cannot share with this library's storage. Write the Delta table to disk or S3.",
            table=storage.root_uri,
        )
    if target == "file":
        uri = storage.root_uri
        return uri[len("file://") :] if uri.startswith("file://") else uri
    return "s3://" + storage.root_uri.split("://", 1)[1]


def object_store_options(storage: Storage) -> dict[str, str]:
    """delta-rs (object_store) options equivalent to the storage's s3fs options."""
    if storage.scheme.lower() not in ("s3", "s3a", "s3n"):
        return {}
    given = storage.options()
    out: dict[str, str] = {"conditional_put": "etag"}
    endpoint = given.get("endpoint_url") or (given.get("client_kwargs") or {}).get("endpoint_url")
    if endpoint:
        out["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
    for ours, theirs in (("key", "AWS_ACCESS_KEY_ID"), ("secret", "AWS_SECRET_ACCESS_KEY"), ("token", "AWS_SESSION_TOKEN")):
        if given.get(ours):
            out[theirs] = str(given[ours])
    region = (given.get("client_kwargs") or {}).get("region_name") or given.get("region_name")
    if region:
        out["AWS_REGION"] = str(region)
    elif endpoint:
        out["AWS_REGION"] = "us-east-1"  # S3-compatible endpoints ignore it, object_store requires one
    return out
