"""Committed data as a Spark DataFrame, for the cases plain ``spark.read`` gets wrong.

``spark.read.<format>(table)`` already honours ``_spark_metadata`` for one non-glob path at the
table's original location, latest snapshot. This reader also handles partition sub-paths,
``as_of``, tables moved to a new root, and pins partition column types; it loads the explicit
list of committed files with ``basePath`` set to the table root, so Spark never lists a
directory and never sees an uncommitted file.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import extras
from ..storage.base import Storage
from .visibility import committed_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _spark_path(storage: Storage, relative: str | None = None) -> str:
    uri = storage.root_uri if relative is None else f"{storage.root_uri}/{relative}"
    return uri[len("file://") :] if uri.startswith("file://") else uri


def spark(
    path: str,
    session: SparkSession,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A Spark DataFrame of exactly the committed rows of ``path`` as of batch ``as_of``.

    Args:
        path: the table's URI or path.
        session: the SparkSession to read with (every reader takes the path first, then the
            engine's handle; the older order ``read.spark(session, path)`` still works, with a
            ``DeprecationWarning``).
        as_of: a retained batch id (default: the latest committed batch).
        storage_options: options of the table's storage backend (e.g. S3 endpoint, credentials).
        allow_outside_root: accept manifest entries outside the table's root (Spark allows them).
        format: the data files' format (default: the one recorded in the table).
        options: reader options (default: the writer options recorded in the table).
    """
    given: Any = path
    if not isinstance(given, str) and isinstance(session, str):  # read.spark(session, path): the old order
        warnings.warn("read.spark takes the table's path first, then the SparkSession", DeprecationWarning, stacklevel=2)
        path, session = session, given
    extras.require("spark", what="read.spark")
    from pyspark.sql.types import StringType, StructField, StructType

    files = committed_files(path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, verify=True)
    fmt = files.file_format(format)
    reader_options = files.reader_options(options)
    paths = files.prefixed(_spark_path(files.storage) + "/") + [u[len("file://") :] if u.startswith("file://") else u for u in files.outside]
    if files.schema_json:
        schema = StructType.fromJson(json.loads(files.schema_json))
        data = [f for f in schema.fields if f.name not in files.partition_columns]
        parts = [schema[c] for c in files.partition_columns if c in schema.fieldNames()]
        schema = StructType(data + parts)
    elif paths:
        sample = session.read.format(fmt).options(**reader_options).load(paths[0]).schema
        schema = StructType(
            [f for f in sample.fields if f.name not in files.partition_columns]
            + [StructField(c, StringType(), True) for c in files.partition_columns]
        )
    else:
        schema = StructType([StructField(c, StringType(), True) for c in files.partition_columns])
    if not paths:
        return session.createDataFrame([], schema)
    reader = session.read.format(fmt).options(**reader_options).schema(schema).option("basePath", _spark_path(files.storage))
    return reader.load(paths)
