"""Storage layer: ``open_storage(uri, options)`` picks the backend for a URI's scheme.

Supported: local paths and ``file:`` URIs, ``s3://``/``s3a://``/``s3n://`` (extra ``[s3]``),
``az://``/``abfs://``/``abfss://`` (extra ``[azure]``), ``gs://``/``gcs://`` (extra ``[gcs]``),
``hdfs://`` and ``hadoop+<scheme>://`` through the running Spark driver's Hadoop filesystem
(``hadoop.py``), and ``memory://`` (tests). Other fsspec schemes are refused with
``UnsupportedStorageError``, because without a known exclusive-create primitive the commit
protocol cannot be made safe on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import extras
from ..errors import UnsupportedStorageError
from .base import FileInfo, PreparedFiles, Storage, join, prepared_files
from .option_keys import translate_storage_options

SUPPORTED_SCHEMES = ("file", "s3", "s3a", "s3n", "az", "abfs", "abfss", "gs", "gcs", "hdfs", "hadoop+<scheme>", "memory")


def scheme_of(uri: str) -> str:
    """The URI scheme, ``file`` for plain paths (including Windows drive letters)."""
    if "://" in uri or uri.startswith("file:"):
        return uri.split(":", 1)[0].lower()
    return "file"


def open_storage(uri: str, options: Mapping[str, Any] | None = None) -> Storage:
    """A `Storage` rooted at ``uri``; ``options`` go to the backend (e.g. s3fs credentials; delta-rs
    style keys such as ``AWS_ENDPOINT_URL`` are translated, see ``option_keys``)."""
    scheme = scheme_of(uri)
    extras.require_storage(uri)  # a missing extra is refused here, before any backend is built
    opts = translate_storage_options(scheme, options or {})
    if scheme == "file":
        from .local import LocalStorage

        return LocalStorage(uri, durable=bool(opts.pop("durable", True)))
    if scheme in ("s3", "s3a", "s3n"):
        from .s3 import S3Storage

        return S3Storage(uri, opts)
    if scheme in ("az", "abfs", "abfss"):
        from .azure import AzureStorage

        return AzureStorage(uri, opts)
    if scheme in ("gs", "gcs"):
        from .gcs import GcsStorage

        return GcsStorage(uri, opts)
    if scheme == "hdfs" or scheme.startswith("hadoop+"):
        from .hadoop import HadoopStorage

        return HadoopStorage(uri, opts)
    if scheme == "memory":
        from .memory import MemoryStorage

        return MemoryStorage(uri, opts)
    raise UnsupportedStorageError(
        f"Storage scheme {scheme!r} in {uri!r} is not supported: the commit protocol needs an "
        f"exclusive create-if-absent primitive, known only for {', '.join(SUPPORTED_SCHEMES)}. "
        "Use one of those, or open an issue naming the filesystem."
    )


__all__ = ["FileInfo", "PreparedFiles", "Storage", "join", "open_storage", "prepared_files", "scheme_of", "SUPPORTED_SCHEMES"]
