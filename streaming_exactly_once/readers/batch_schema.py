"""The schema and partition columns of a snapshot: the table schema, else the commit records.

A table's schema is recorded in ``_seo/schema/M`` at its first batch and at each batch that
changes it (``table.schema_log``); a reader of batch N uses the newest record at or below N -
``as_of`` an old batch gets the columns that batch had, a table that gained columns gets nulls
for the rows written before. Tables written before schema records existed: the batch's Spark
schema in its commit record, at N or up to three batches below it (empty batches record none).
A recorded schema the Arrow readers cannot use is logged and skipped, never fatal: the files
carry their own schema. Without a record, partition columns come from the table identity or,
for a table this library did not write, from the first file's ``k=v`` directories.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidAsOfError
from ..manifest.paths import parse_partition_dir
from ..table.commits_log import CommitsLog
from ..table.identity import TableIdentity, read_identity
from ..table.schema_log import schema_as_of as table_schema_as_of
from ..table.table_logs import open_manifest
from .arrow_schema import schema_fields
from .as_of import check_as_of
from .manifest_checks import latest_batch
from .table_location import locate

log = logging.getLogger("streaming_exactly_once.readers")


def schema_as_of(commits: CommitsLog | None, identity: TableIdentity | None, as_of: int | None) -> tuple[str | None, tuple[str, ...]]:
    """(schema JSON or None, partition columns) of batch ``as_of`` (module docstring)."""
    if commits is None or identity is None or as_of is None:
        return None, ()
    try:
        table_schema = table_schema_as_of(commits.storage, as_of)
    except Exception as exc:  # noqa: BLE001 - the files carry their own schema
        log.warning("ignoring the table schema of %s: %s", commits.storage.root_uri, exc)
        table_schema = None
    if table_schema is not None:
        return table_schema.schema, identity.partition_by
    for batch_id in range(as_of, max(identity.first_batch_id, as_of - 3) - 1, -1):
        try:
            record = commits.record(batch_id)
        except Exception:
            record = None
        if record is not None and record.schema:
            try:
                schema_fields(record.schema)
            except ValueError as exc:
                log.warning("ignoring the schema recorded in %s: %s", commits.uri(batch_id), exc)
                continue
            return record.schema, identity.partition_by
    return None, identity.partition_by


def partitions_from_paths(relative: list[str]) -> tuple[str, ...]:
    """Partition columns named by the ``k=v`` directories of the first path (if any)."""
    if not relative:
        return ()
    return tuple(c for c, _ in parse_partition_dir(posixpath.dirname(relative[0])))


def table_schema(path: str, *, as_of: int | None = None, storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The Spark schema JSON the readers read batch ``as_of`` (default: the latest) of ``path``
    with - what vanilla Spark needs to be given to read a table whose types were widened::

        spark.read.schema(StructType.fromJson(json.loads(read.schema(path)))).parquet(path)

    None for a table without a recorded schema."""
    as_of = check_as_of(as_of)
    storage = locate(path, storage_options).storage
    identity = read_identity(storage)
    if identity is None:
        return None
    commits = CommitsLog(storage, interval=identity.compact_interval)
    latest = latest_batch(storage, identity, open_manifest(storage, identity), commits=commits)
    if latest is None:
        return None
    if as_of is not None and as_of > latest:
        raise InvalidAsOfError(f"as_of={as_of}: table {storage.root_uri} has no batch {as_of}; its latest batch is {latest}.", as_of=as_of)
    return schema_as_of(commits, identity, latest if as_of is None else as_of)[0]
