"""Recovery: bring a table back to a clean state before a writer commits anything new.

Run by the lease owner, once per process and after any failed batch, before the next batch:

0. **Record** what the WAL holds, once per epoch, before anything is deleted
   (``commit.recovery_record``): a claim that appears later was made by a fenced writer.
1. **Roll forward** every pending WAL entry that may have published or may still publish:
   ``M == L + 1`` (the next batch after the latest manifest batch ``L``, claimed by our crashed
   predecessor or by a writer we just fenced, *before* the takeover) or ``M <= L`` whose manifest
   file holds its entries (published, bookkeeping unfinished). Each step is verified and
   executed only if not done; then the entry is deleted.
2. **Discard** any other WAL entry - a claim made by a fenced writer after a takeover, which the
   first recovery after it did not see (it never executed a step, by the fencing protocol, and
   its data may already be gone) - together with what is left of its data.
3. **Abort** staging directories that no WAL entry refers to (attempts that never reached their
   claim): their staged data - and, in ``direct`` mode, the data files their intents name - was
   never visible and is deleted.
4. **Forget intents** (offsets records an older release wrote before staging) of manifest
   batches after ``L``.

Every destructive step is preceded by a fence check: a writer that lost the table meanwhile
stops instead of deleting its successor's in-flight data. Nothing here lists a data directory;
the cost depends on what is pending, not on history.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from ..errors import LogCorruptError, MissingBatchError
from ..storage.base import Storage
from ..table.layout import STAGING_DIR, parse_staging_name
from ..table.table_logs import TableLogs
from .recovery_record import claim_may_roll_forward, record_first_recovery
from .sequence import CommitSequence
from .step import StepContext
from .steps import PublishManifest
from .wal import CommitSequenceStore

log = logging.getLogger("streaming_exactly_once.recovery")

INTENTS_SUBDIR = "intents"


@dataclass
class RecoveryReport:
    latest_batch_id: int
    rolled_forward: list[int] = field(default_factory=list)
    discarded: list[int] = field(default_factory=list)
    aborted_attempts: list[str] = field(default_factory=list)
    removed_intents: list[int] = field(default_factory=list)
    deleted_data_files: int = 0

    @property
    def clean(self) -> bool:
        return not (self.rolled_forward or self.discarded or self.aborted_attempts or self.removed_intents)


def _manifest_holds(logs: TableLogs, seq: CommitSequence) -> bool:
    records = logs.manifest.get(seq.batch_id)
    if records is None:
        return False
    present = {e.path for e in records}
    for step in seq.steps:
        if isinstance(step, PublishManifest):
            return all(e.path in present for e in step.entries)
    return False


def abort_attempt(storage: Storage, staging: str) -> int:
    """Delete an unpublished attempt: data files its intents name, then its staging directory."""
    deleted = 0
    for entry in storage.list_dir(f"{staging}/{INTENTS_SUBDIR}"):
        try:
            target = storage.read_bytes(entry.path).decode("utf-8").strip()
        except (FileNotFoundError, UnicodeDecodeError):
            continue
        if target and not target.startswith(("/", "_")) and ".." not in target.split("/"):
            if storage.exists(target):
                storage.delete(target)
                deleted += 1
    storage.delete_tree(staging)
    return deleted


def discard_sequence(storage: Storage, seq: CommitSequence) -> int:
    """Remove a claim that must never publish, with the data it staged or wrote."""
    deleted = 0
    if seq.mode == "direct":
        for step in seq.steps:
            if isinstance(step, PublishManifest):
                for entry in step.entries:
                    rel = _relative_to_root(storage, entry.uri)
                    if rel is not None and storage.exists(rel):
                        storage.delete(rel)
                        deleted += 1
    deleted += abort_attempt(storage, seq.staging_dir)
    return deleted


def _relative_to_root(storage: Storage, uri: str) -> str | None:
    from ..manifest.paths import normalize_uri

    root = normalize_uri(storage.root_uri).rstrip("/") + "/"
    uri = normalize_uri(uri)
    return uri[len(root):] if uri.startswith(root) else None


def recover(
    storage: Storage,
    logs: TableLogs,
    wal: CommitSequenceStore,
    ctx: StepContext,
    *,
    retries: int = 3,
    latest: int | None = None,
    published: Callable[[CommitSequence], bool] | None = None,
    fence: Callable[[str], None] = lambda what: None,
) -> RecoveryReport:
    """``ctx.epoch`` is the recovering writer's epoch (it must hold the lease); ``fence(what)``
    raises ``WriterFencedError`` once it no longer does. ``latest``/``published``: for a dataset
    group, the latest group batch and whether a claim's batch already committed (a group has no
    manifest of its own to ask)."""
    if ctx.epoch is None:
        raise ValueError("recovery needs the epoch of the lease it runs under")
    fence("recover")
    if latest is None:
        assert logs.manifest is not None
        latest = logs.manifest.latest_batch_id(refresh=True)
        latest = -1 if latest is None else latest
    is_published = published or (lambda seq: _manifest_holds(logs, seq))
    report = RecoveryReport(latest_batch_id=latest)
    claims = [seq for batch_id in wal.pending() if (seq := wal.get(batch_id)) is not None]
    record_first_recovery(storage, ctx.epoch, claims)
    live_staging: set[str] = set()
    for seq in claims:
        batch_id = seq.batch_id
        may_roll = seq.epoch >= ctx.epoch or claim_may_roll_forward(storage, seq)
        if may_roll and (batch_id == latest + 1 or (batch_id <= latest and is_published(seq))):
            fence("complete")
            log.warning("rolling forward pending commit of manifest batch %d (query %s, Spark batch %d)", batch_id, seq.query_id, seq.spark_batch_id)
            seq.run(ctx, fresh=False, retries=retries)
            wal.delete(batch_id)
            storage.delete_tree(seq.staging_dir)  # leftovers; the data has moved or is committed
            report.rolled_forward.append(batch_id)
            latest = max(latest, batch_id)
        else:
            fence("discard")
            why = "claimed after a takeover" if not may_roll else "never published"
            log.warning("discarding WAL entry %d of fenced writer epoch %d (%s)", batch_id, seq.epoch, why)
            report.deleted_data_files += discard_sequence(storage, seq)
            wal.delete(batch_id)
            report.discarded.append(batch_id)
        live_staging.add(seq.staging_dir)
    for entry in storage.list_dir(STAGING_DIR):
        if not entry.is_dir or parse_staging_name(entry.name) is None or entry.path in live_staging:
            continue
        fence("abort")
        report.deleted_data_files += abort_attempt(storage, entry.path)
        report.aborted_attempts.append(entry.name)
    assert logs.offsets is not None
    for batch_id in range(latest + 1, latest + 4):
        path = logs.offsets.path(batch_id)
        if storage.exists(path):
            fence("forget")
            storage.delete(path)
            report.removed_intents.append(batch_id)
    logs.offsets.latest_batch_id(refresh=True)
    report.latest_batch_id = latest
    return report


def check_logs_consistent(logs: TableLogs, latest: int, first_batch_id: int) -> None:
    """After recovery every published batch has its commit and sources record."""
    manifest_gaps = logs.manifest.gaps() if logs.manifest is not None else []
    if manifest_gaps:
        raise MissingBatchError(
            directory=logs.manifest.uri(),  # type: ignore[union-attr]
            missing=manifest_gaps,
            context=f"the manifest has batches up to {latest}",
            hint="Readers would fail or miss committed data. Restore the files from a backup.",
        )
    for log_ in logs.all_logs():
        log_.check_snapshot()
    if latest < first_batch_id:
        return
    assert logs.offsets is not None and logs.sources is not None
    last_offsets = logs.offsets.latest_batch_id(refresh=True)
    if last_offsets is not None and last_offsets < latest:
        raise LogCorruptError(
            path=logs.offsets.uri(),
            batch_id=latest,
            problem=f"the offsets log ends at batch {last_offsets}, but the manifest is at batch {latest}",
            hint="Run `seo recover <table> --rebuild-logs` to rebuild the missing records from the commits log.",
        )
    offsets_gaps = [b for b in logs.offsets.gaps() if b >= first_batch_id]
    if offsets_gaps:
        raise LogCorruptError(
            path=logs.offsets.uri(),
            batch_id=offsets_gaps[0],
            problem=f"the offsets log is missing batch file(s) {offsets_gaps[:5]}",
            hint="Restore them from a backup; the commits log still holds what they recorded, so "
            "`seo recover <table> --rebuild-logs` can write replacements.",
        )
    for log_, name in ((logs.commits, "commits"), (logs.sources, "sources")):
        last = log_.latest_batch_id(refresh=True)
        if last is None or last < latest:
            missing = list(range((last if last is not None else first_batch_id - 1) + 1, latest + 1))
            raise LogCorruptError(
                path=log_.uri(),
                batch_id=missing[0],
                problem=f"the {name} log ends at batch {last}, but the manifest is at batch {latest}: "
                f"record(s) of batch(es) {missing[:5]} were deleted",
                hint="Run `seo recover <table> --rebuild-logs` to rebuild them from the offsets log "
                "(the sink will not guess which query they belong to).",
            )
        gaps = [b for b in log_.gaps() if b >= first_batch_id]
        if gaps:
            raise LogCorruptError(
                path=log_.uri(),
                batch_id=gaps[0],
                problem=f"the {name} log is missing batch file(s) {gaps[:5]}",
                hint="Run `seo recover <table> --rebuild-logs` to rebuild them from the offsets log.",
            )
        if last > latest:
            raise LogCorruptError(
                path=log_.uri(),
                batch_id=last,
                problem=f"the {name} log has batch {last} beyond the manifest's latest batch {latest}: "
                "manifest files were deleted",
                hint="Restore _spark_metadata from a backup; readers would miss committed data.",
            )
