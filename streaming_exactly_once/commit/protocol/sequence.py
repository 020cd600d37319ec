"""A commit sequence: every step of one batch's commit, persisted before the first one runs.

This is the write-ahead log record (Gobblin's CommitSequence). Its bytes, in ``_seo/wal/M``::

    v3
    {"batchId":12,"queryId":"c578917c-...","sparkBatchId":40,"epoch":3,"attempt":"9f2c41d0","mode":"rename","stagingDir":"_seo/staging/12-9f2c41d0-e3","createdMs":1795313165300}
    {"kind":"move","moves":[["_seo/staging/12-9f2c41d0-e3/data/day=1/part-0.parquet","day=1/part-0.parquet",903]]}
    {"kind":"manifest","batchId":12,"entries":[{"path":"file:///t/day=1/part-0.parquet","size":903,...}]}
    {"kind":"offsets","record":{"batchId":12,"queryId":"c578917c-...",...}}
    {"kind":"sources","batchId":12,"files":[...]}
    {"kind":"commit","record":{...}}
    {"kind":"cleanup","path":"_seo/staging/12-9f2c41d0-e3"}

Line 2 is the header (who, which batch, and the writer's ``epoch``: recovery decides by it
whether a claim may still roll forward, see ``commit.protocol.recovery``); each further line is one step
(``commit.protocol.steps``). Once this file exists the batch can only roll forward: ``run`` skips steps
whose ``verify()`` says they are done and executes the rest, retrying a failing step a bounded
number of times.

A table format's step follows ``manifest`` (``commit.table_steps.format_step`` shows its
fields). The first line is the version: ``v1`` (before the
``offsets`` step) and ``v2`` (before attempt verdicts) are still read and rolled forward; ``v3``
is written for an entry with none of the steps below (bytes of ``v2``; the bump makes releases
without ``_seo/verdicts`` refuse it); ``v4`` with a ``delta`` step, ``v5`` with a ``schema``
step, ``v6`` with an ``iceberg`` step, ``v7`` when it publishes a compaction's rewrites - each
so that a release without that feature refuses the entry ("upgrade") instead of finishing the
batch without it. An unknown step kind means a newer release wrote the entry: refused the same
way. ``docs/design/commit-protocol.md`` has the full bytes and why each version exists.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field as dc_field, replace
from functools import partial
from typing import Any

from ...errors import CommitError, ExactlyOnceError, LogCorruptError, StorageAccessError, WriterFencedError
from ...log.codec import RecordError
from ...log.record_fields import decode, encode, flattened, json_field
from ...log.version import encode_file, encode_line, parse_body
from ...storage.base import Storage
from ...storage.io_threads import submit_or_run
from ...table.attempt_key import AttemptKey, KeyedByAttempt
from .lease import fenced_cause
from .step import REGISTRY, CommitStep, StepContext

log = logging.getLogger("streaming_exactly_once.commit")

VERSION = 7  # newest version read; ``to_bytes`` writes the oldest one that can say the entry
#: Step kinds that need a reader of at least this version (entries without them are ``v3``).
KIND_VERSIONS = {"delta": 4, "schema": 5, "iceberg": 6}
#: An entry with a step that publishes a compaction's rewrites (``CommitStep.replaces_files``).
REWRITES_VERSION = 7
HINT = (
    "A WAL entry is the only record of an in-flight commit. If its manifest batch does not exist yet "
    "the batch was never visible: `seo recover <table> --discard-wal M` removes the entry and its "
    "staged data, and Spark re-runs the batch. Otherwise restore the file from a backup."
)

#: OSErrors that retrying cannot fix.
_NOT_TRANSIENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError, StorageAccessError)


@dataclass
class CommitSequence(KeyedByAttempt):
    """A WAL entry: its header (the claim: attempt key, staging dir, creation time) and steps."""

    key: AttemptKey = dc_field(metadata=flattened(AttemptKey))
    staging_dir: str = dc_field(metadata=json_field("stagingDir", str))
    created_ms: int = dc_field(metadata=json_field("createdMs", int))
    steps: list[CommitStep] = dc_field(default_factory=list)  # one line each, not in the header

    def header(self) -> dict[str, Any]:
        return encode(self)

    @property
    def file_version(self) -> int:
        return max([3] + [REWRITES_VERSION if s.replaces_files else KIND_VERSIONS.get(s.kind, 3) for s in self.steps])

    def to_bytes(self) -> bytes:
        return encode_file(self.file_version, [encode_line(self.header())] + [encode_line(s.to_json()) for s in self.steps])

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str, batch_id: int | None) -> CommitSequence:
        _, objects = parse_body(data, path=path, batch_id=batch_id, max_supported=VERSION, hint=HINT)
        if not objects:
            raise LogCorruptError(path=path, batch_id=batch_id, problem="no header record", hint=HINT)
        try:
            head = objects[0]
            seq = decode(cls, head)
            for number, obj in enumerate(objects[1:], start=3):
                kind = obj.get("kind")
                if kind not in REGISTRY:
                    raise LogCorruptError(
                        path=path,
                        batch_id=batch_id,
                        problem=f"line {number} has a commit step this release does not know ({kind!r:.40})",
                        hint="If a newer release of streaming-exactly-once wrote this table, upgrade before "
                        "recovering or writing it; otherwise the entry is damaged. " + HINT,
                    )
                seq.steps.append(REGISTRY[kind].from_json(obj))
        except RecordError as exc:
            raise LogCorruptError(path=path, batch_id=batch_id, problem=str(exc), hint=HINT) from None
        if batch_id is not None and seq.batch_id != batch_id:
            raise LogCorruptError(path=path, batch_id=batch_id, problem=f"header says batch {seq.batch_id}", hint=HINT)
        return seq

    def run(
        self,
        ctx: StepContext,
        *,
        fresh: bool,
        retries: int = 3,
        backoff_s: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Bring every step to done. ``fresh``: we just wrote the WAL, so nothing ran yet.

        In a fresh run, consecutive bookkeeping steps (``CommitStep.bookkeeping``: offsets,
        sources, commit record) run concurrently, so the batch waits for one durable write
        instead of three; a roll-forward runs every step in order. Each step's duration (ms)
        goes into ``ctx.timings`` under its kind.
        """
        run_step = partial(self._run_step, fresh=fresh, retries=retries, backoff_s=backoff_s, sleep=sleep)
        overlap = fresh and ctx.pool is not None
        for together, run in itertools.groupby(self.steps, key=lambda step: overlap and step.bookkeeping):
            group = list(run)
            if together and len(group) > 1:
                self._run_together(group, ctx, run_step)
            else:
                for step in group:
                    run_step(step, ctx)

    def written(self, ctx: StepContext, *, deferred: bool = False) -> list[tuple[Storage, str]]:
        """The files the steps wrote (``CommitStep.written``); ``deferred``: only those a fresh
        commit wrote without their sync (``CommitStep.sync_deferred``)."""
        return [pair for step in self.steps if step.sync_deferred or not deferred for pair in step.written(ctx)]

    def rewrite_deferred(self, ctx: StepContext) -> None:
        """Write the records a fresh commit wrote without their sync again, durably
        (``CommitStep.rewrite_durably``): never trust a later fsync of a file whose sync failed
        or may have - Linux marks the pages of a failed fsync clean."""
        for step in self.steps:
            if step.sync_deferred:
                step.rewrite_durably(ctx)

    def _run_step(self, step: CommitStep, ctx: StepContext, *, fresh: bool, retries: int, backoff_s: float, sleep: Callable[[float], None]) -> None:
        t0 = time.perf_counter()
        if fresh or not step.verify(ctx):
            self._execute_with_retries(step, ctx, retries=retries, backoff_s=backoff_s, sleep=sleep)
        ctx.timings[step.kind] = round((time.perf_counter() - t0) * 1000, 3)

    def _run_together(self, group: list[CommitStep], ctx: StepContext, run_step: Callable[[CommitStep, StepContext], None]) -> None:
        """Run ``group`` concurrently on ``ctx.pool`` (the first step on this thread); return once
        every step has finished, and raise the first error in WAL order - never while another
        step of the batch is still writing."""
        assert ctx.pool is not None
        before = dict(ctx.timings)  # each step sees the timings of the steps before the group
        contexts = [replace(ctx, timings=dict(before)) for _ in group]
        futures = [submit_or_run(ctx.pool, run_step, step, own) for step, own in zip(group[1:], contexts[1:], strict=True)]
        errors: list[BaseException | None] = []
        try:
            run_step(group[0], contexts[0])
            errors.append(None)
        except BaseException as exc:  # re-raised below, once the others have finished
            errors.append(exc)
        errors += [future.exception() for future in futures]
        for step, own in zip(group, contexts, strict=True):
            if step.kind in own.timings:
                ctx.timings[step.kind] = own.timings[step.kind]
        failed = [(step, error) for step, error in zip(group, errors, strict=True) if error is not None]
        for step, error in failed[1:]:  # only the first is raised: the others are not lost
            log.error("commit step '%s' of batch %d failed too: %r", step.kind, self.batch_id, error)
        if failed:
            raise failed[0][1]

    def _execute_with_retries(self, step: CommitStep, ctx: StepContext, *, retries: int, backoff_s: float, sleep: Callable[[float], None]) -> None:
        attempt = 0
        while True:
            try:
                step.execute(ctx)
                return
            except WriterFencedError:
                raise
            except (ExactlyOnceError, FileNotFoundError) as exc:
                # a fenced writer's step fails on what its successor changed (a temp file removed
                # as dead, a snapshot expired under an Iceberg commit): the cause is the fencing
                fenced = fenced_cause(ctx.storage, ctx.epoch, "complete")
                if fenced is not None:
                    raise fenced from exc
                raise
            except _NOT_TRANSIENT:
                raise
            except OSError as exc:
                attempt += 1
                if attempt > retries:
                    raise CommitError(
                        f"Commit step '{step.kind}' of manifest batch {self.batch_id} failed {attempt} times "
                        f"({exc}). The batch is safe in the WAL (_seo/wal/{self.batch_id}) and is rolled "
                        "forward at the next start of the sink or by `seo recover <table>`.",
                        batch_id=self.batch_id,
                        step=step.kind,
                    ) from exc
                sleep(backoff_s * (2 ** (attempt - 1)))


def make_durable(seq: CommitSequence, ctx: StepContext) -> None:
    """Before a roll-forward deletes ``seq``'s claim: every file its steps wrote, durable. The
    records a fresh commit wrote without their sync are written again, durably (a failed fsync
    in this boot may have left their pages clean but never written); the other files are synced."""
    seq.rewrite_deferred(ctx)
    sync_files([pair for step in seq.steps if not step.sync_deferred for pair in step.written(ctx)])


def sync_files(files: Sequence[tuple[Storage, str]]) -> None:
    """Sync ``files`` (``Storage.sync``), one call per storage, so the fsyncs of each overlap."""
    by_storage: dict[int, tuple[Storage, list[str]]] = {}
    for storage, path in files:
        by_storage.setdefault(id(storage), (storage, []))[1].append(path)
    for storage, paths in by_storage.values():
        storage.sync(paths)


#: Timings a sink records beside the steps' (``stepMs``) that are not part of the commit: the
#: batch's preparation on the driver, Spark's write, and the background rewrite of small files
#: a compaction batch publishes (``commit.rewrites.rewrite_preparation``).
NOT_COMMIT = ("prepare", "stage", "rewrite")


def commit_ms(step_ms: Mapping[str, float]) -> float:
    """How long a commit took, from its ``stepMs``: the bookkeeping steps ran concurrently, so
    they count once, as the longest of them."""
    together = [ms for kind, ms in step_ms.items() if kind in REGISTRY and REGISTRY[kind].bookkeeping]
    alone = sum(
        ms
        for kind, ms in step_ms.items()  # "rewrite:<table>": a dataset group's table's
        if kind.split(":", 1)[0] not in NOT_COMMIT and not (kind in REGISTRY and REGISTRY[kind].bookkeeping)
    )
    return round(alone + max(together, default=0.0), 3)


# Every step kind a WAL entry may hold is registered before any entry is read.
from ..table_steps import format_step, ledger_step, schema_step  # noqa: E402,F401
from . import steps  # noqa: E402,F401
