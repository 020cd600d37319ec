"""``seo log`` for people and tools: a log's batch files, a batch's records, the table's history."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .json_keys import camel_keys
from .printer import Printer, human_bytes, human_time

if TYPE_CHECKING:
    from ..log.batch_log import BatchLog
    from ..readers.history import BatchInfo
    from ..table.commits_log import CommitsLog


def print_batch_records(out: Printer, log_: BatchLog[Any], kind: str, batch: int) -> None:
    """``seo log --batch N``: the records of one batch file, as the log's codec writes them."""
    records = [log_.codec.to_json(r) for r in log_.read(batch)]
    if out.as_json:
        out.json({"kind": kind, "batch": batch, "file": log_.uri(batch), "records": records})
        return
    out.write(f"{log_.uri(batch)}  ({len(records)} records)")
    for record in records:
        out.write("  " + " ".join(f"{k}={v}" for k, v in record.items() if k != "schema"))


def print_group_batches(out: Printer, commits: CommitsLog) -> None:
    """``seo log --kind commits`` on a group root: one line per group batch, with its tables."""
    records = [r for r in (commits.record(b) for b in commits.list_batch_ids()) if r is not None]
    rows = []
    previous: dict[str, Any] = {}
    for r in records:
        datasets = {k: e for k, e in (r.datasets or {}).items() if isinstance(e, dict) and "lastGroupBatch" in e}
        # a table is in the batch if the batch is its last (its status and checks are about it),
        # or if its own batch moved (``seo compact``'s empty batches leave the first alone)
        touched = [
            k
            for k, e in datasets.items()
            if e.get("lastGroupBatch") == r.batch_id or (k in previous and e.get("batchId") != previous[k].get("batchId"))
        ]
        previous = datasets
        rows.append((r.batch_id, human_time(r.commit_time_ms), r.num_rows, r.num_files, r.spark_batch_id, len(touched)))
    if out.as_json:
        out.json([{"batchId": r[0], "rows": r[2], "files": r[3], "sparkBatchId": r[4], "tables": r[5]} for r in rows])
    else:
        out.table(rows, ["batch", "committed", "rows", "files", "spark batch", "tables"])


def compaction_note(batch: BatchInfo) -> str:
    """What compaction did in ``batch``: its manifest file is a ``.compact`` file, it published
    rewrites of small files, ``seo compact`` committed it; it adopted a directory's files."""
    from ..table.library_queries import ADOPTION_QUERY, MAINTENANCE_QUERY

    notes = []
    if batch.query_id == ADOPTION_QUERY:
        notes.append("adopted existing files")
    if batch.query_id == MAINTENANCE_QUERY:
        notes.append("seo compact" if batch.rewritten_files else "seo compact (empty)")
    if batch.rewritten_files:
        notes.append(f"{batch.replaced_files} files -> {batch.rewritten_files}")
    if batch.compact_file:
        notes.append(".compact file")
    return ", ".join(notes) or "-"


def print_table_history(out: Printer, root_uri: str, storage_options: dict[str, Any]) -> None:
    """``seo log`` (the manifest): each batch a reader can ask for with ``as_of``, and what
    compaction did in it."""
    from ..readers.history import batches

    history = batches(root_uri, storage_options=storage_options)
    if out.as_json:
        out.json([camel_keys(r.__dict__) for r in history])
        return
    out.table(
        [
            (
                r.batch_id,
                "yes" if r.readable else "no",
                human_time(r.commit_time_ms),
                r.num_rows,
                r.num_files,
                human_bytes(r.num_bytes),
                r.spark_batch_id,
                (r.query_id or "-")[:8],
                compaction_note(r),
            )
            for r in history
        ],
        ["batch", "as_of ok", "committed", "rows", "files", "bytes", "spark batch", "query", "compaction"],
    )
