"""Recovery without a running query, and the explicit repairs the error messages point to.

* ``recover_table`` - take the lease, roll pending commits forward, remove aborted attempts,
  release the lease. The same thing the sink does when it starts; safe at any time. With
  ``accept_int96`` a pending Iceberg commit may name INT96 data files (a batch an earlier
  release published before checking them).
* ``discard_wal`` - drop one WAL entry *whose manifest batch was never published and cannot be*:
  a corrupt entry, or a claim whose data files were deleted by something outside the protocol.
  Refused if the manifest file exists (the batch is visible and must be completed) and if the
  claim has all its files (it can be completed, and a frozen writer may be completing it).
  Spark re-runs the batch, because its checkpoint has no commit for it.
* ``rebuild_logs`` - recreate missing offsets records from the commits log (source offsets are
  then unknown), and missing commits/sources records of published batches from the offsets log
  (the intent each batch wrote before staging). A rebuilt sources record is empty,
  so those batches' input files are not protected against a recreated checkpoint; the command
  says which batches that affects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from ..checkpoint.reader import SparkCheckpoint
from ..commit.committer import CommitterOptions
from ..commit.protocol.attempt_verdict import ABORT, COMMIT, decide, overrule, read_verdict
from ..commit.protocol.lease import Lease, wait_for_release, writer_still_running
from ..commit.protocol.recovery import RecoveryReport, claim_files_missing, discard_sequence, recover
from ..commit.protocol.sequence import CommitSequence
from ..commit.protocol.step import StepContext
from ..commit.protocol.wal import CommitSequenceStore
from ..errors import ExactlyOnceError, IcebergTableError, LogCorruptError, UnsupportedLogVersionError
from ..storage import open_storage
from ..storage.base import Storage
from ..table.attempt_key import AttemptKey
from ..table.commits_log import CommitRecord
from ..table.identity import read_identity
from ..table.offsets_log import OffsetsRecord
from ..table.source_offsets import merged_ends
from ..table.table_logs import TableLogs
from .group_tables import group_tables
from .table_extras import require_table_extras

log = logging.getLogger("streaming_exactly_once.maintenance")


def _logs(storage: Storage) -> TableLogs:
    identity = read_identity(storage)
    if identity is not None and identity.kind != "table":
        raise ExactlyOnceError(
            f"{storage.root_uri} is a dataset group's {'root' if identity.kind == 'group' else 'table'}: only "
            "`seo recover` (without options) applies to it; its logs are rebuilt by restoring from a backup.",
        )
    return TableLogs.for_identity(storage, identity)


def recover_table(storage: Storage, *, lease_timeout_ms: int = 60_000, accept_int96: bool = False) -> RecoveryReport:
    """``accept_int96``: a pending Iceberg commit may name INT96 data files (``seo recover
    --accept-int96``, the way out its refusal names; ``iceberg.files.parquet_rows``)."""
    require_table_extras(storage)
    identity = read_identity(storage)
    if identity is not None and identity.kind == "group":
        from ..commit.groups.group_committer import GroupCommitter

        # (no compaction is prepared: this writer commits no batch, its close would discard it)
        options = CommitterOptions(compact_interval=identity.compact_interval, lease_timeout_ms=lease_timeout_ms, prepare_compactions=False)
        group = GroupCommitter(storage, options)
        wait_for_release(storage)
        try:
            report = group.open()
            for name in group_tables(storage, identity):  # under the group's lease
                _discard_iceberg_leftovers(storage.child(name))
            return report
        finally:
            group.close()
    # A roll-forward on an object store can outlast the lease timeout: heartbeat meanwhile, and
    # stop at the first fence check that fails (another writer took the table over).
    lease = Lease(storage, timeout_ms=lease_timeout_ms, description="seo recover")
    wait_for_release(storage)
    lease.acquire()
    lease.start_heartbeat()
    try:
        logs = _logs(storage)
        ctx = StepContext(storage=storage, logs=logs, epoch=lease.epoch, accept_int96=accept_int96)
        report = recover(storage, logs, CommitSequenceStore(storage), ctx, fence=lease.check_fence)
        _discard_iceberg_leftovers(storage)
        return report
    finally:
        lease.release()


def _discard_iceberg_leftovers(storage: Storage) -> None:
    """What Iceberg commits killed by earlier writers left (``iceberg.leftovers``) for the batches
    the table holds, as a writer's open deletes it. A table that does not load is
    ``seo verify``'s to report, not recovery's."""
    identity = read_identity(storage)
    if identity is None or identity.iceberg is None:
        return
    from ..iceberg.leftovers import discard_leftovers
    from ..iceberg.target import IcebergTarget

    target = IcebergTarget(storage, identity.iceberg.app_id, catalog=identity.iceberg.catalog)
    try:
        applied = target.applied_batch()
        target.repair_hint()  # a writer died, or a zombie woke, between its commit and the hint
    except IcebergTableError as exc:
        log.warning("left the Iceberg metadata of %s as it is: %s", storage.root_uri, exc)
        return
    if applied is None:
        target.check_found()  # a catalog configured elsewhere than the sink's: say so, do not report success
        return
    discard_leftovers(target, applied)


def discard_wal(storage: Storage, batch_id: int, *, lease_timeout_ms: int = 60_000) -> str:
    """A person's decision that a claim must never publish. Order matters, because a writer or
    a recoverer may be rolling the same claim forward: take the lease (fencing older writers),
    record ``abort`` (a ``commit`` verdict of a *newer* epoch, or a manifest file that appeared,
    means someone completed it - refuse), check the fence and the manifest once more, and only
    then delete the claim's data."""
    logs = _logs(storage)

    def refuse_if_published(when: str) -> None:
        if storage.exists(logs.require_manifest().path(batch_id)) or storage.exists(f"{logs.require_manifest().directory}/{batch_id}"):
            raise ExactlyOnceError(
                f"Manifest batch {batch_id} of {storage.root_uri} is published{when}, so its WAL entry must be "
                "rolled forward, not discarded. Nothing was deleted. Run `seo recover` instead.",
                batch_id=batch_id,
            )

    refuse_if_published("")
    lease = Lease(storage, timeout_ms=lease_timeout_ms, description="seo recover --discard-wal")
    wait_for_release(storage)
    lease.acquire()
    lease.start_heartbeat()  # slow object stores: keep the table while deleting
    try:
        epoch = lease.epoch or 0
        wal = CommitSequenceStore(storage)
        try:
            raw = storage.read_bytes(wal.path(batch_id))
        except FileNotFoundError:
            raw = None
        try:
            seq = wal.get(batch_id)
        except (LogCorruptError, UnsupportedLogVersionError):
            seq = None  # unreadable: nothing of it can have been published (checked above and below)
        if seq is not None:
            _refuse_completable(storage, batch_id, seq)
            _record_abort(storage, batch_id, seq, epoch)
        lease.check_fence("discard")
        refuse_if_published(" (completed by another writer while this command ran)")
        if seq is not None:
            discard_sequence(storage, seq)
        # Only what we judged: if this command was frozen long enough for a newer writer to
        # re-run the batch under the same number, its claim and records are not ours to delete.
        if seq is not None:
            wal.delete(batch_id, attempt=seq.attempt)
        elif raw is not None:
            wal.delete(batch_id, raw=raw)
        try:
            intent = logs.require_offsets().record(batch_id)
        except (LogCorruptError, UnsupportedLogVersionError):
            intent = None  # left for recovery, which forgets records of batches after the latest
        # Written by the claim's attempt (an older release's intent) - and this command still
        # holds the table: frozen after the claim went, a newer writer may have forgotten that
        # record and re-run the batch under the number, and the record is its own now.
        if intent is not None and seq is not None and intent.attempt == seq.attempt and not lease.is_fenced():
            storage.delete(logs.require_offsets().path(batch_id))
        if seq is None and raw is None:
            return f"no WAL entry {batch_id}: nothing to discard (the batch is not pending; `seo status` shows the table's batches)"
        return f"discarded WAL entry {batch_id}"
    finally:
        lease.release()


def _refuse_completable(storage: Storage, batch_id: int, seq: CommitSequence) -> None:
    """Refuse to discard a claim someone may still complete: one with all its files, or one
    whose writer still runs."""
    if not claim_files_missing(storage, seq):
        # A claim with all its files can be completed, and may be completed right now: a
        # frozen writer past its last fence check, or a recoverer, publishes it whatever we
        # decide here. Deleting its files would make that publish name missing files.
        raise ExactlyOnceError(
            f"WAL entry {batch_id} of {storage.root_uri} (attempt {seq.attempt}, epoch {seq.epoch}) has every "
            "data file it needs, so it is completed, not discarded: run `seo recover`. Nothing was deleted.",
            batch_id=batch_id,
        )
    running = writer_still_running(storage, seq.epoch)
    if running is not None:
        # A frozen writer past its last fence check publishes its claim when it wakes up;
        # files deleted now would be named by that manifest entry. (Across hosts this cannot
        # be seen: the README's limits say to stop the writer before discarding.)
        raise ExactlyOnceError(
            f"WAL entry {batch_id} of {storage.root_uri} was claimed by writer epoch {seq.epoch} (pid {running.pid} "
            f"on {running.host}), which is still running. Stop that process first. Nothing was deleted.",
            batch_id=batch_id,
        )


def _record_abort(storage: Storage, batch_id: int, seq: CommitSequence, epoch: int) -> None:
    """Record the person's ``abort`` verdict, overruling an older recovery's ``commit`` (one that
    then found it could not publish); refuse if a newer writer is rolling the claim forward."""
    if decide(storage, batch_id, seq.attempt, ABORT, epoch=epoch) == COMMIT:
        held = read_verdict(storage, batch_id, seq.attempt)
        if held is not None and held.epoch > epoch:
            raise ExactlyOnceError(
                f"Writer epoch {held.epoch} took {storage.root_uri} over while this command ran and is "
                f"rolling WAL entry {batch_id} forward. Nothing was deleted. Run `seo status`.",
                batch_id=batch_id,
            )
        # an older recovery judged it 'commit' and then found it could not publish (the
        # case this command exists for): the person's 'abort' replaces that verdict
        overrule(storage, batch_id, seq.attempt, ABORT, epoch=epoch)


@dataclass
class RebuildReport:
    offsets: list[int] = field(default_factory=list)
    commits: list[int] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    unprotected_batches: list[int] = field(default_factory=list)
    #: batches left to the roll-forward of their WAL entry (it writes the full records)
    pending: list[int] = field(default_factory=list)
    #: rebuilt offsets records of partitioned sources (Kafka) whose source offsets neither the
    #: query's Spark checkpoint nor anything else still holds: the table's committed offsets
    #: (``starting_offsets``, the offset guard) may stand below what these batches wrote
    offsets_unknown: list[int] = field(default_factory=list)


def rebuild_logs(storage: Storage, *, lease_timeout_ms: int = 60_000) -> RebuildReport:
    logs = _logs(storage)
    identity = read_identity(storage)
    first = identity.first_batch_id if identity else 0
    logs.require_manifest().gaps()  # a stray manifest file is a named error, not a latest batch to rebuild up to
    latest = logs.require_manifest().latest_batch_id(refresh=True)
    report = RebuildReport()
    if latest is None:
        return report
    lease = Lease(storage, timeout_ms=lease_timeout_ms, description="seo recover --rebuild-logs")
    wait_for_release(storage)
    lease.acquire()
    try:
        present_commits = set(logs.commits.list_batch_ids())
        present_sources = set(logs.require_sources().list_batch_ids())
        present_offsets = set(logs.require_offsets().list_batch_ids())
        # A batch with a WAL entry is rolled forward by the recovery that follows, with the
        # records its entry holds (source offsets, input files); rebuilding them here from the
        # commit record would put poorer records in their place, which the roll-forward accepts.
        pending = set(CommitSequenceStore(storage).pending())
        low = min(present_commits | present_sources | present_offsets | {first})
        for batch_id in range(max(first, low), latest + 1):
            if batch_id in pending:
                report.pending.append(batch_id)
                continue
            if batch_id not in present_offsets and batch_id in present_commits:
                record = logs.commits.record(batch_id)
                if record is not None:
                    checkpoint, source_offsets, partitioned = _query_offsets(logs, record.query_id, record.spark_batch_id)
                    logs.require_offsets().add(
                        batch_id,
                        [
                            OffsetsRecord.of(
                                replace(record.key, batch_id=batch_id),
                                written_ms=record.commit_time_ms,
                                checkpoint=checkpoint,
                                source_offsets=source_offsets,
                            )
                        ],
                    )
                    report.offsets.append(batch_id)
                    if partitioned and not source_offsets:
                        report.offsets_unknown.append(batch_id)
            if batch_id not in present_commits:
                intent = logs.require_offsets().record(batch_id)
                if intent is None:
                    raise ExactlyOnceError(
                        f"Cannot rebuild the commit record of batch {batch_id}: its offsets record is gone too, so "
                        "which query batch it holds is unknown. Restore _seo/offsets or _seo/commits from a backup.",
                        batch_id=batch_id,
                    )
                logs.commits.add(
                    batch_id,
                    [
                        CommitRecord.of(
                            AttemptKey(batch_id, intent.query_id, intent.spark_batch_id, intent.epoch, intent.attempt, "unknown"),
                            num_files=0,
                            num_rows=None,
                            num_bytes=0,
                            commit_time_ms=intent.written_ms,
                            reconstructed=True,
                        )
                    ],
                )
                report.commits.append(batch_id)
            if batch_id not in present_sources:
                logs.require_sources().add(batch_id, [])
                report.sources.append(batch_id)
                report.unprotected_batches.append(batch_id)
        return report
    finally:
        lease.release()


def _query_offsets(logs: TableLogs, query_id: str, spark_batch_id: int) -> tuple[str | None, tuple[str | None, ...], bool]:
    """For a lost offsets record: the query's checkpoint (from its other records), the batch's
    source offsets read back from that checkpoint where it still holds them (else empty), and
    whether the query reads a partitioned source (its other records carry such offsets)."""
    others = [r for r in logs.require_offsets().all_records() if r.query_id == query_id]
    checkpoint = next((r.checkpoint for r in reversed(others) if r.checkpoint), None)
    partitioned = any(merged_ends(r.source_offsets) for r in others)
    if checkpoint is None:
        return None, (), partitioned
    try:
        found = SparkCheckpoint(open_storage(checkpoint)).offsets(spark_batch_id)
    except (ExactlyOnceError, OSError, ValueError):
        found = None
    return checkpoint, (tuple(found.offsets) if found is not None else ()), partitioned
