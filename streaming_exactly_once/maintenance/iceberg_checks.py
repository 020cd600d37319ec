"""What ``seo status``, ``seo verify`` and ``seo gc`` know of a ``format="iceberg"`` table's
Iceberg metadata (``iceberg.target``), beside its manifest.

* status: the current snapshot, the batch high-water mark (table property
  ``seo.batch-id.<app id>``), the current metadata file and the catalog;
* verify: the Iceberg table holds the manifest's batches - a batch still pending in the WAL is a
  warning (``iceberg-pending``: the next start rolls it forward), anything else behind or ahead
  an error - and its current snapshot names the same data files as the manifest; a required
  partition column (``iceberg-required-partition``) is a warning;
* gc: every file a retained snapshot or a retained metadata version needs (data files,
  manifests, manifest lists, metadata files, the version hint) is kept; what only expired
  snapshots or retired metadata versions named is garbage.

Catalog-backed tables are opened with pyiceberg's own configuration of that catalog
(``PYICEBERG_CATALOG__<NAME>__*``, ``~/.pyiceberg.yaml``): the sink's catalog properties are never
stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ExactlyOnceError
from ..storage.base import Storage
from ..table.identity import IcebergIdentity

if TYPE_CHECKING:
    from ..iceberg.target import IcebergTarget
    from ..readers.committed_files import CommittedFiles
    from .reports import VerifyReport


def _target(storage: Storage, iceberg: IcebergIdentity) -> IcebergTarget:
    from ..iceberg.target import IcebergTarget

    return IcebergTarget(storage, iceberg.app_id, catalog=iceberg.catalog)


def check_iceberg(
    storage: Storage,
    iceberg: IcebergIdentity,
    latest: int | None,
    current: CommittedFiles,
    report: VerifyReport,
    claimed: set[int],
    empty_after: Callable[[int], bool] = lambda held: False,
) -> None:
    """``seo verify``: the Iceberg table holds the manifest's batches and the same files;
    ``claimed``: the batches a pending claim completes (``verify.in_flight``)."""
    try:
        target = _target(storage, iceberg)
        where = target.name
        target.check_found()
        applied = target.applied_batch()
        live = {f.path for f in target.live_files()}
        hint_ok = target.hint_current()
        hint_gone = None if hint_ok else target.hint_missing()
        required = target.required_partition_columns()
    except ExactlyOnceError as exc:
        report.add("error", "iceberg-unreadable", storage.uri("metadata"), str(exc))
        return
    applied = -1 if applied is None else applied
    latest = -1 if latest is None else latest
    if applied < latest and empty_after(applied):
        applied = latest  # ``seo compact``'s batches of no file: no Iceberg snapshot of theirs
    if applied < latest:
        if all(b in claimed for b in range(applied + 1, latest + 1)):
            report.add(
                "warning",
                "iceberg-pending",
                where,
                f"batches {applied + 1}..{latest} are pending in the WAL; the next start (or `seo recover`) commits them to Iceberg",
            )
        else:
            report.add("error", "iceberg-behind", where, f"holds batches up to {applied}, the manifest up to {latest}: Iceberg readers miss data")
    elif applied > latest:
        report.add("error", "iceberg-ahead", where, f"holds batches up to {applied}, the manifest only up to {latest}")
    if hint_gone is not None:
        report.add(
            "error",
            "iceberg-hint-missing",
            storage.uri("metadata/version-hint.text"),
            f"names v{hint_gone}.metadata.json, which does not exist (a writer frozen in its hint write while newer writers "
            "retired that version): path-based readers (pyiceberg, polars, DuckDB, Spark's Hadoop catalog) cannot open the "
            "table. `seo recover` or the next start points it at the current version.",
        )
    elif not hint_ok:
        report.add(
            "warning",
            "iceberg-stale-hint",
            storage.uri("metadata/version-hint.text"),
            "names an older metadata version than the current one (a writer died between the two); path-based readers read the "
            "older version until the next start or `seo recover` points it right (a writer frozen after its commit "
            "can move it back while a newer writer runs: the next start points it right)",
        )
    if required:
        report.add(
            "warning",
            "iceberg-required-partition",
            where,
            f"partition column(s) {required} are required in the Iceberg schema (as a release before this one created them); "
            "Spark's files do not hold them, and pyiceberg refuses to read the table. The next batch makes them optional.",
        )
    manifest_files = set(current.relative)
    if applied == latest and live != manifest_files:
        only_iceberg, only_manifest = len(live - manifest_files), len(manifest_files - live)
        report.add(
            "error" if only_manifest else "warning",
            "iceberg-diverged",
            where,
            f"{only_iceberg} file(s) only in the Iceberg table's current snapshot, {only_manifest} only in the manifest: Iceberg "
            "readers and manifest readers see different rows" + (" (another Iceberg writer changed the table)" if only_iceberg else ""),
        )
