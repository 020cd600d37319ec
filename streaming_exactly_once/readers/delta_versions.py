"""Which Delta version of a ``format="delta"`` table holds exactly manifest batch N.

Each batch is one Delta commit carrying the transaction (table, batch), so the two histories
line up one to one: an engine reading the Delta log directly (``polars.read_delta(table,
version=...)``, ``DeltaTable(table, version=...)``) reads the same rows as the manifest readers
when it is given this version. The empty batches ``seo compact`` commits to reach a compaction
batch have no Delta version (``manifest.empty_batches``): as of one of them, the table is the
version of the batch before it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .. import extras
from ..delta.log_snapshot import unloadable_version_cause
from ..errors import InvalidAsOfError, MissingDependencyError, TableNotFoundError
from ..manifest.empty_batches import empty_between
from ..storage.base import Storage
from ..table.commits_log import CommitsLog
from ..table.identity import TableIdentity, read_identity
from ..table.table_logs import open_manifest
from .as_of import before_first_file, check_as_of
from .manifest_checks import latest_batch
from .table_location import locate

log = logging.getLogger("streaming_exactly_once.readers")


def version_of_batch(storage: Storage, identity: TableIdentity, batch_id: int, *, latest: bool, commits: CommitsLog | None = None) -> int | None:
    """The Delta version of manifest batch ``batch_id`` (see ``delta_version``). For the latest
    batch it is the one the commit record noted (no Delta log is read); for an older one it is
    looked up in the Delta log. None if unknown: the Delta log no longer has it (log retention),
    or ``deltalake`` is not installed - the manifest still reads the batch. ``commits``: the
    table's commits log, if the caller has one open already."""
    from ..delta.target import DeltaTarget

    if commits is None:
        commits = CommitsLog(storage, interval=identity.compact_interval)
    record = commits.record(batch_id)
    hint = record.delta_version if record is not None else None
    if latest:
        return hint
    try:
        manifest = open_manifest(storage, identity)
        target = DeltaTarget(storage, identity.delta_app_id or "")
        return target.version_for_batch(batch_id, hint=hint, skipped=lambda held, upto: empty_between(manifest, held, upto))
    except (InvalidAsOfError, MissingDependencyError) as exc:
        log.warning("%s", exc)
        return None


def delta_version(path: str, *, as_of: int | None = None, storage_options: Mapping[str, Any] | None = None) -> int:
    """The Delta version of a ``format="delta"`` table that holds exactly manifest batch ``as_of``
    (default: the latest batch) - what a Delta reader passes as ``version=`` to read the same rows."""
    as_of = check_as_of(as_of)
    storage = locate(path, storage_options).storage
    identity = read_identity(storage)
    if identity is None or not identity.is_delta:
        raise TableNotFoundError(f"{storage.root_uri} is not a Delta table written by this library (format='delta').")
    extras.require("delta", what="read.delta_version")  # it reads the Delta log
    manifest = open_manifest(storage, identity)
    latest = latest_batch(storage, identity, manifest)
    batch = latest if as_of is None else as_of
    if batch is None or (latest is not None and batch > latest):
        raise InvalidAsOfError(f"as_of={as_of}: table {storage.root_uri} has no batch {batch}; its latest batch is {latest}.", as_of=as_of)
    version = version_of_batch(storage, identity, batch, latest=False)
    if version is None:
        raise before_first_file(manifest, identity.first_batch_id, batch, commit="Delta version") or InvalidAsOfError(
            f"as_of={batch}: the Delta version of batch {batch} {unloadable_version_cause(storage)}: {storage.uri('_delta_log')}; "
            "the manifest readers (read.arrow, read.spark, ...) still read it.",
            as_of=batch,
        )
    return version
