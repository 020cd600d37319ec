"""A batch's ledger from what a writer knows before its claim, and ``audit="enforce"``'s check of it.

Why here and not in the step module: building it asks the writer (the table's offsets marks, the
query's last committed Spark batch) and a compaction batch's rewrites; the step only carries and
writes the result.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..checkpoint.reader import InputFile
from ..errors import AuditViolationError
from ..storage.base import Storage
from ..storage.io_threads import map_waiting
from ..table.ledger import Compaction, LedgerRecord
from ..table.ledger_checks import batch_violations
from ..table.source_offsets import merged_ends, read_by_several
from .groups.group_members import MemberBatch
from .protocol.attempt import BatchAttempt, elapsed_ms
from .protocol.steps import MemberPublish
from .rewrites.table_rewrites import BatchRewrites
from .table_steps.ledger_step import LedgerInputs, StagedRead, WriteLedger, build_ledger, coverage, file_entry
from .writer import Writer


def gap_reason(writer: Writer, query_id: str, spark_batch_id: int, *, allowed: bool = False) -> str:
    """Why a batch may start above the table's mark: its query's batches in between were empty
    (it committed an earlier one, not the one before), or the sink accepted the gap (a query the
    table does not know passed the offset guard only with ``allow_offset_gaps``: ``allowed``, or
    an id the table never saw - also a new checkpoint under a given ``query_id``); else none."""
    if allowed or not writer.knows_query(query_id):
        return "allowOffsetGaps"
    last = writer.last_spark_batch(query_id)
    return "emptyBatches" if last is not None and last < spark_batch_id - 1 else "unexplained"


def compaction_of(storage: Storage, rewrites: BatchRewrites) -> Compaction | None:
    """A compaction batch's replaced files with their rows (one tail read each: the rewrite
    read them whole just before), rows added filled in by ``build_ledger``."""
    if not rewrites:
        return None
    prefix = f"{rewrites.table}/" if rewrites.table else ""
    replaced = [p for r in rewrites.rewrites for p, _ in r.replaced]
    entries = map_waiting(f"ledger-{storage.root_uri}", lambda p: file_entry(storage, prefix + p, p, 0), replaced)  # size 0: the tail only
    rows = [e.rows for e in entries]
    return Compaction(tuple(zip(replaced, rows, strict=True)), None if None in rows else sum(r for r in rows if r is not None), 0)


def batch_ledger(
    writer: Writer,
    attempt: BatchAttempt,
    files: Sequence[tuple[str, str, int, int | None]],
    rewrites: BatchRewrites,
    *,
    input_files: Sequence[InputFile],
    num_rows: int | None,
    num_skipped_rows: int,
    storage: Storage | None = None,
    batch_id: int | None = None,
    source_offsets: Sequence[str | None] | None = None,
    reads: Mapping[str, StagedRead] | None = None,
) -> LedgerRecord:
    """The ledger of ``attempt``'s batch (a group's table: its ``storage`` and ``batch_id``);
    ``reads``: the files the writer read already, by path."""
    storage = storage or writer.storage
    offsets = attempt.offsets.source_offsets if source_offsets is None else source_offsets
    marks = writer.offset_marks() if merged_ends(offsets) else {}
    reason = gap_reason(writer, attempt.query_id, attempt.spark_batch_id, allowed=attempt.ledger.gaps_allowed)
    resets = frozenset(name for name, at in attempt.offsets.offset_resets.items() if at == attempt.batch_id)
    previous = writer.query_offsets(attempt.query_id) if merged_ends(offsets) else None
    several = read_by_several(offsets, previous.source_offsets if previous is not None else None)
    partitions = coverage(
        offsets, attempt.ledger.start, marks, gap_reason=reason, dropped_below=attempt.ledger.dropped_below, resets=resets, several=several
    )
    rewritten = [(r.staged, r.rewrite.final, r.rewrite.size, r.rewrite.rows) for r in rewrites.staged]
    return build_ledger(
        storage,
        batch_id=attempt.batch_id if batch_id is None else batch_id,
        query_id=attempt.query_id,
        spark_batch_id=attempt.spark_batch_id,
        files=files,
        partitions=partitions,
        input_files=input_files,
        num_rows=num_rows,
        num_skipped_rows=num_skipped_rows,
        inputs=attempt.ledger,
        compaction=compaction_of(storage, rewrites),
        rewritten=rewritten,
        reads=reads,
        manifest_retention_ms=writer.options.retention_ms,
    )


def member_ledger(writer: Writer, attempt: BatchAttempt, mb: MemberBatch, m: int, rewrites: BatchRewrites, formats: dict[str, bool]) -> WriteLedger:
    """A group table's ledger for its batch ``m``: its files (read under the group root), rows
    routed to it and rows its checks set aside (``rejected``); the offsets are the root's."""
    t0 = time.perf_counter()
    files = [(f.staged or f"{mb.table}/{f.final}", f.final, f.size, f.rows) for f in mb.files]
    own = replace(attempt, ledger=LedgerInputs(rows_rejected=mb.quarantined_rows))
    record = batch_ledger(writer, own, files, rewrites, input_files=(), num_rows=mb.rows, num_skipped_rows=0, batch_id=m, source_offsets=())
    published: dict[str, int | None] = {"manifest": m}
    published.update({name: None for name, used in formats.items() if used})
    record = replace(record, published=published)
    if writer.options.audit == "enforce":
        enforce(record, {}, table=writer.storage.child(mb.table).root_uri)
    attempt.timings["ledgerBuild"] = attempt.timings.get("ledgerBuild", 0.0) + elapsed_ms(t0)
    return WriteLedger(record=record, table=mb.table)


def root_ledger(writer: Writer, attempt: BatchAttempt, input_files: Sequence[InputFile], publishes: Sequence[MemberPublish]) -> WriteLedger:
    """A group batch's own ledger: its source coordinates (the tables' ledgers hold the files)."""
    record = batch_ledger(writer, attempt, [], BatchRewrites(), input_files=input_files, num_rows=None, num_skipped_rows=0)
    record = replace(record, published={f"table:{p.table}": p.batch_id for p in publishes})
    if writer.options.audit == "enforce":
        enforce(record, writer.offset_marks(), table=f"{writer.storage.root_uri} (group batch {attempt.batch_id})")
    return WriteLedger(record=record)


def enforce(ledger: LedgerRecord, marks: Mapping[str, int], *, table: str) -> None:
    """``audit="enforce"``: refuse the batch (before its claim) if its ledger breaks an invariant."""
    violations = batch_violations(ledger, marks)
    if not violations:
        return
    lines = "\n".join(f"  - [{v.check}] {v.message}" for v in violations)
    raise AuditViolationError(
        f"Table {table}: batch {ledger.batch_id} (Spark batch {ledger.spark_batch_id} of query {ledger.query_id}) breaks "
        f"{len(violations)} exactly-once invariant(s), so audit='enforce' refused it and nothing of it was published:\n{lines}\n"
        "Spark will run the batch again when the query restarts; fix the cause first, or write with audit='record' to "
        "publish it and let `seo audit` report it.",
        table=table,
        batch_id=ledger.batch_id,
        violations=[v.to_json() for v in violations],
    )
