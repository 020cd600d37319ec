"""Recovery: bring a table back to a clean state before a writer commits anything new.

Run by the lease owner, once per process and after any failed batch, in phases (one function
each): roll forward every claim that may have published or is next, discard the others - an
earlier epoch's claims as their verdict says (``commit.protocol.attempt_verdict``); abort staging
directories no claim names; forget intents of batches after the latest; remove dead temp files
of earlier writers (``table.temp_files``). Every destructive step is preceded by a fence check,
and nothing deletes a file a published manifest entry names (``PublishedFiles``). The cost
depends on what is pending, not on history. ``docs/design/recovery.md`` explains each phase.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Protocol

from ...errors import CommitError, LogCorruptError, MissingBatchError
from ...log.compaction import is_compaction_batch
from ...manifest.entry import ManifestEntry
from ...manifest.paths import canonical_uri, relative_to_root, root_prefix
from ...storage.base import Storage
from ...table.identity import read_identity
from ...table.layout import STAGING_DIR, parse_staging_name, staging_dir_holding
from ...table.table_logs import TableLogs
from ...table.temp_files import remove_earlier_writers_files
from .attempt_verdict import ABORT, COMMIT, decide, read_verdict
from .sequence import CommitSequence, make_durable
from .step import StepContext
from .steps import MoveFiles, PublishManifest
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
    removed_temp_files: list[str] = field(default_factory=list)  # URIs

    @property
    def clean(self) -> bool:
        return not (self.rolled_forward or self.discarded or self.aborted_attempts or self.removed_intents or self.removed_temp_files)


class PublishedFiles:
    """The data files of published manifest batches: what recovery, an abort, a discard and gc
    never delete, whatever an intent or a claim says.

    Only an attempt of a batch at or below the latest published one can name such a file (data
    file names are unique per attempt): an intent that outlived its claim - an unlink the disk
    reordered - or a claim judged unpublished through a stale view. That is never the steady
    state, so the set is read, once, only when such an attempt is about to be deleted."""

    def __init__(self, storage: Storage, logs: TableLogs | None, latest: int) -> None:
        self.storage = storage
        self.manifest = logs.manifest if logs is not None else None
        self.latest = latest
        self._names: frozenset[str] | None = None

    def of_batch(self, batch_id: int) -> frozenset[str]:
        """Published files an attempt of ``batch_id`` could name (paths relative to the root)."""
        if self.manifest is None or batch_id > self.latest:
            return frozenset()
        if self._names is None:
            identity = read_identity(self.storage)
            roots = {root_prefix(uri) for uri in (self.storage.root_uri, *(identity.root_uris if identity else ()))}
            names: set[str] = set()
            for entry in self.manifest.files():
                uri = canonical_uri(entry.uri)
                names.update(uri[len(root) :] for root in roots if uri.startswith(root))
            self._names = frozenset(names)
        return self._names


def abort_attempt(storage: Storage, staging: str, *, keep: Container[str] = frozenset()) -> int:
    """Delete an unpublished attempt: data files its intents name (none in ``keep``, the
    published ones), then its staging directory."""
    deleted = 0
    for entry in storage.list_dir(f"{staging}/{INTENTS_SUBDIR}"):
        try:
            target = storage.read_bytes(entry.path).decode("utf-8").strip()
        except (FileNotFoundError, UnicodeDecodeError):
            continue
        if target and not target.startswith(("/", "_")) and ".." not in target.split("/"):
            if target in keep:
                log.error("intent %s names published data file %s: the file stays", entry.path, target)
                continue
            if storage.exists(target):
                storage.delete(target)
                deleted += 1
    storage.delete_tree(staging)
    return deleted


def discard_sequence(storage: Storage, seq: CommitSequence, *, keep: Container[str] = frozenset(), moved: bool = False) -> int:
    """Remove a claim that must never publish, with the data it staged or wrote (none in
    ``keep``, the published files); ``moved``: the files its move step moved into the table too."""
    targets: list[str] = []
    for step in seq.steps:
        if seq.mode == "direct" and isinstance(step, PublishManifest):
            targets += [rel for entry in step.entries if (rel := relative_to_root(storage.root_uri, entry.uri)) is not None]
        elif moved and isinstance(step, MoveFiles):
            # the attempt's own names: only its writer, withdrawing a claim none of whose steps
            # reached the manifest, knows they are not published (gc collects them otherwise)
            targets += [move.dst for move in step.moves]
    deleted = 0
    for rel in targets:
        if rel in keep:
            log.error("WAL entry %d names published data file %s: the file stays", seq.batch_id, rel)
        elif storage.exists(rel):
            storage.delete(rel)
            deleted += 1
    deleted += abort_attempt(storage, seq.staging_dir, keep=keep)
    return deleted


def claim_files_missing(storage: Storage, seq: CommitSequence) -> list[str]:
    """Data files a claim needs and cannot find: in direct mode the files its manifest entries
    name (but those a move of the claim brings there: a compaction batch's rewrites); in either
    mode the files of a move whose staged source and target are both gone. Empty means the claim
    can be completed."""
    missing = []
    moved = {m.dst for step in seq.steps if isinstance(step, MoveFiles) for m in step.moves}
    for step in seq.steps:
        if seq.mode == "direct" and isinstance(step, PublishManifest):
            for entry in step.entries:
                rel = relative_to_root(storage.root_uri, entry.uri)
                if rel in moved:
                    continue
                if rel is None or not storage.exists(rel):
                    missing.append(entry.uri)
        elif isinstance(step, MoveFiles):
            missing += [storage.uri(m.dst) for m in step.moves if not storage.exists(m.src) and not storage.exists(m.dst)]
    return missing


def _check_direct_files(storage: Storage, seq: CommitSequence) -> None:
    """Never publish a manifest entry whose data file is gone: a direct-mode claim about to roll
    forward must find every file it names (rename mode's move step checks its own)."""
    if seq.mode != "direct":
        return
    missing = claim_files_missing(storage, seq)
    if missing:
        raise CommitError(
            f"Pending commit of manifest batch {seq.batch_id} (WAL entry, attempt {seq.attempt}, epoch {seq.epoch}) "
            f"names {len(missing)} data file(s) that do not exist, e.g. {missing[0]}; the roll-forward stopped. "
            "Something outside the commit protocol deleted them (e.g. a Delta VACUUM that ran while the batch "
            "waited for its Delta commit). Restore them, or discard the entry with "
            f"`seo recover <table> --discard-wal {seq.batch_id}` so that Spark re-runs the batch."
        )


class PublishedView(Protocol):
    """What recovery asks the root it recovers: a table's manifest, a group's commit records."""

    def latest(self) -> int:
        """The latest published batch (-1: none)."""
        ...

    def published(self, seq: CommitSequence) -> bool:
        """Whether claim ``seq``'s batch is published (as that claim, not another attempt)."""
        ...


class ManifestView:
    """A single table: a batch is published once its manifest file holds the claim's entries."""

    def __init__(self, logs: TableLogs) -> None:
        self.logs = logs
        self.manifest = logs.require_manifest()

    def latest(self) -> int:
        newest = self.manifest.latest_batch_id(refresh=True)
        return -1 if newest is None else newest

    def published(self, seq: CommitSequence) -> bool:
        records = self.manifest.get(seq.batch_id)
        if records is None:
            return False
        publishes = [step for step in seq.steps if isinstance(step, PublishManifest)]
        if publishes and not any(step.entries for step in publishes):
            return self._empty_claim_published(seq, records)
        present = {e.path for e in records}
        return any(all(e.path in present for e in step.entries) for step in publishes)

    def _empty_claim_published(self, seq: CommitSequence, records: list[ManifestEntry]) -> bool:
        """A claim that lists no file (``seo compact``'s batches of no data) has nothing of its own
        in the manifest: its batch is published if the manifest file holds no entry (a delta
        file; a compact file holds the listing) and the batch's offsets record, if there is one,
        is its own. Another writer's batch there left entries or its own offsets record: that
        writer's claim, at the same WAL path, went only after its records were durable."""
        if not is_compaction_batch(seq.batch_id, self.manifest.interval) and any(not e.is_dir for e in records):
            return False
        offsets = [r for r in self.logs.require_offsets().get(seq.batch_id) or [] if r.batch_id == seq.batch_id]
        return not offsets or offsets[-1].attempt == seq.attempt


@dataclass
class _Recovery:
    """One recovery's state, shared by its phases."""

    storage: Storage
    logs: TableLogs
    wal: CommitSequenceStore
    ctx: StepContext
    epoch: int
    fence: Callable[[str], None]
    report: RecoveryReport
    guard: PublishedFiles
    latest: int

    def discard(self, seq: CommitSequence, why: str) -> None:
        self.fence("discard")
        log.warning("discarding WAL entry %d of writer epoch %d (%s)", seq.batch_id, seq.epoch, why)
        self.report.deleted_data_files += discard_sequence(self.storage, seq, keep=self.guard.of_batch(seq.batch_id))
        self.wal.delete(seq.batch_id, attempt=seq.attempt)
        self.report.discarded.append(seq.batch_id)


def recover(
    storage: Storage,
    logs: TableLogs,
    wal: CommitSequenceStore,
    ctx: StepContext,
    *,
    view: PublishedView | None = None,
    retries: int = 3,
    fence: Callable[[str], None] = lambda what: None,
) -> RecoveryReport:
    """``ctx.epoch`` is the recovering writer's epoch (it must hold the lease); ``fence(what)``
    raises ``WriterFencedError`` once it no longer does; ``view`` says what is published (a
    table's manifest by default).

    The WAL is listed *before* the latest batch is read. A fenced writer may still be finishing
    a commit it claimed before our epoch began; its claim is then either in our listing (and we
    roll it forward with it, step by idempotent step) or already deleted, which it does last -
    after publishing, so the latest batch read next includes it. Read the other way round, a
    batch published in between would be missed and its offsets record deleted as a stale intent."""
    if ctx.epoch is None:
        raise ValueError("recovery needs the epoch of the lease it runs under")
    fence("recover")
    claims = [seq for batch_id in wal.pending() if (seq := wal.get(batch_id)) is not None]
    view = view or ManifestView(logs)
    latest = view.latest()
    state = _Recovery(storage, logs, wal, ctx, ctx.epoch, fence, RecoveryReport(latest), PublishedFiles(storage, logs, latest), latest)
    for seq in claims:
        _settle_claim(state, seq, view, retries)
    _abort_unclaimed_attempts(state, {seq.staging_dir for seq in claims})
    _forget_intents(state)
    state.report.latest_batch_id = state.latest
    for info in remove_earlier_writers_files(storage, ctx.epoch, fence=fence):
        state.report.removed_temp_files.append(storage.uri(info.path))
    fence("recovered")  # a writer frozen in here learns now, not at its next batch, that its view is stale
    return state.report


def _settle_claim(state: _Recovery, seq: CommitSequence, view: PublishedView, retries: int) -> None:
    """Phases 1 and 2: roll a claim forward if its batch may have published or is next, else
    discard it - an earlier epoch's claim only as its verdict says."""
    batch_id = seq.batch_id
    already_published = batch_id <= state.latest and view.published(seq)
    if not (already_published or batch_id == state.latest + 1):
        if seq.epoch < state.epoch:
            state.fence("decide")
            if decide(state.storage, batch_id, seq.attempt, ABORT, epoch=state.epoch) == COMMIT:
                raise CommitError(
                    f"WAL entry {state.wal.path(batch_id)} (attempt {seq.attempt}, epoch {seq.epoch}) was judged "
                    f"'commit' by an earlier recovery, but manifest batch {batch_id} is neither published "
                    f"nor next (the manifest is at batch {state.latest}). Nothing was deleted; run `seo status` "
                    "and `seo recover` to inspect the table."
                )
        state.discard(seq, "never published")
        return
    if seq.epoch < state.epoch:
        state.fence("decide")
        if not already_published and (aborted := _moves_from_aborted_attempt(state.storage, seq)) is not None:
            # its staged rewrites were judged 'abort' and deleted before this claim was seen: it
            # was claimed after a takeover and can never complete
            if decide(state.storage, batch_id, seq.attempt, ABORT, epoch=state.epoch) == ABORT:
                state.discard(seq, f"claimed after a takeover: the staging directory {aborted} it moves files from was aborted")
                return
        verdict = decide(state.storage, batch_id, seq.attempt, COMMIT, epoch=state.epoch)
        if verdict == ABORT and not already_published:
            state.discard(seq, "aborted before its claim was seen: claimed after a takeover")
            return
        if verdict == ABORT:
            log.error("manifest batch %d is published although attempt %s was judged aborted; finishing it", batch_id, seq.attempt)
    if not already_published:
        _check_direct_files(state.storage, seq)
    state.fence("complete")
    log.warning("rolling forward pending commit of manifest batch %d (query %s, Spark batch %d)", batch_id, seq.query_id, seq.spark_batch_id)
    seq.run(state.ctx, fresh=False, retries=retries)
    # A step verified done may have been written without its sync - by a fresh commit
    # (``CommitStep.sync_deferred``) or by a writer killed between a rename and its sync: it
    # must survive a power cut before the claim that could redo it goes.
    make_durable(seq, state.ctx)
    # The rewrites' staging goes before the claim: left by a crash after it, a later recovery
    # would take it for an attempt that never claimed (and judge a published rewrite 'abort').
    for directory in _other_staging_dirs(seq):
        state.storage.delete_tree(directory)  # emptied by the moves, which are durable
    state.wal.delete(batch_id, attempt=seq.attempt)
    state.storage.delete_tree(seq.staging_dir)  # leftovers; the data has moved or is committed
    state.report.rolled_forward.append(batch_id)
    state.latest = max(state.latest, batch_id)
    state.guard = PublishedFiles(state.storage, state.logs, state.latest)


def _moves_from_aborted_attempt(storage: Storage, seq: CommitSequence) -> str | None:
    """The staging directory, other than the claim's own, that one of its moves takes a file
    from and that a recovery or ``seo gc`` judged 'abort' (and deleted): a compaction batch's
    rewrites are staged in a directory of their own (``commit.rewrites.rewrite_preparation``). None if
    there is no such directory."""
    for directory in _other_staging_dirs(seq):
        parsed = parse_staging_name(directory.rsplit("/", 1)[-1])
        if parsed is None:
            continue
        verdict = read_verdict(storage, parsed[0], parsed[1])
        if verdict is not None and verdict.verdict == ABORT:
            return directory
    return None


def _other_staging_dirs(seq: CommitSequence) -> list[str]:
    """The staging directories besides the claim's own that its moves take files from (a
    compaction batch's rewrites); once the claim rolled forward they hold only leftovers."""
    own = seq.staging_dir.rstrip("/")
    held = (staging_dir_holding(move.src) for step in seq.steps if isinstance(step, MoveFiles) for move in step.moves)
    return sorted({directory for directory in held if directory is not None and directory != own})


def _abort_unclaimed_attempts(state: _Recovery, claimed: set[str]) -> None:
    """Phase 3: staging directories no claim names - attempts that never claimed - are deleted
    with the data their intents name; an earlier epoch's only after its ``abort`` verdict."""
    storage = state.storage
    for entry in storage.list_dir(STAGING_DIR):
        parsed = parse_staging_name(entry.name)
        if not entry.is_dir or parsed is None or entry.path in claimed:
            continue
        batch_id, attempt, epoch = parsed
        if epoch is not None and epoch > state.epoch:
            continue  # a newer writer's attempt: we are fenced, and it is not ours to judge
        if epoch is None or epoch < state.epoch:
            state.fence("decide")
            if decide(storage, batch_id, attempt, ABORT, epoch=state.epoch) == COMMIT:
                if batch_id <= state.latest:
                    # judged 'commit' and its WAL entry gone before the WAL was listed: the
                    # roll-forward finished and died before deleting the staging leftovers.
                    # Only those remain; the data is published - never ``abort_attempt`` it.
                    state.fence("abort")
                    storage.delete_tree(entry.path)
                continue  # otherwise being rolled forward by whoever judged it
        state.fence("abort")
        state.report.deleted_data_files += abort_attempt(storage, entry.path, keep=state.guard.of_batch(batch_id))
        state.report.aborted_attempts.append(entry.name)


def _forget_intents(state: _Recovery) -> None:
    """Phase 4: offsets records an older release wrote before staging, of batches after the latest."""
    offsets = state.logs.require_offsets()
    for batch_id in range(state.latest + 1, state.latest + 4):
        path = offsets.path(batch_id)
        if state.storage.exists(path):
            state.fence("forget")
            state.storage.delete(path)
            state.report.removed_intents.append(batch_id)
    offsets.latest_batch_id(refresh=True)


def check_logs_consistent(logs: TableLogs, latest: int, first_batch_id: int) -> None:
    """After recovery every published batch has its commit and sources record."""
    manifest_gaps = logs.manifest.gaps() if logs.manifest is not None else []
    if logs.manifest is not None and manifest_gaps:
        raise MissingBatchError(
            directory=logs.manifest.uri(),
            missing=manifest_gaps,
            context=f"the manifest has batches up to {latest}",
            hint="Readers would fail or miss committed data. Restore the files from a backup.",
        )
    for log_ in logs.all_logs():
        log_.check_snapshot()
    if latest < first_batch_id:
        return
    offsets, sources = logs.require_offsets(), logs.require_sources()
    last_offsets = offsets.latest_batch_id(refresh=True)
    if last_offsets is not None and last_offsets < latest:
        raise LogCorruptError(
            path=offsets.uri(),
            batch_id=latest,
            problem=f"the offsets log ends at batch {last_offsets}, but the manifest is at batch {latest}",
            hint="Run `seo recover <table> --rebuild-logs` to rebuild the missing records from the commits log.",
        )
    offsets_gaps = [b for b in offsets.gaps() if b >= first_batch_id]
    if offsets_gaps:
        raise LogCorruptError(
            path=offsets.uri(),
            batch_id=offsets_gaps[0],
            problem=f"the offsets log is missing batch file(s) {offsets_gaps[:5]}",
            hint="Restore them from a backup; the commits log still holds what they recorded, so "
            "`seo recover <table> --rebuild-logs` can write replacements.",
        )
    for log_, name in ((logs.commits, "commits"), (sources, "sources")):
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
                problem=f"the {name} log has batch {last} beyond the manifest's latest batch {latest}: manifest files were deleted",
                hint="Restore _spark_metadata from a backup; readers would miss committed data.",
            )
