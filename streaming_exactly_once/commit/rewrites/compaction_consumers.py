"""Registered downstream consumers: Spark queries that read a compacted table as a file source,
whose checkpoints the writer reads before it plans a rewrite.

Why (``docs/design/data-compaction.md``): a file-source query remembers the files it read by
path, so the new file of a rewrite is new to it. It skips the file only when the file's
timestamp is below ``latestTimestamp - maxFileAge`` (``latestTimestamp``: the newest file it has
read). And if it has read some of the replaced files and not others, skipping the new file loses
rows. So a file may be rewritten only if every registered consumer has read it and its timestamp
is below that consumer's horizon; the new file's timestamp is the newest of the files it
replaces, so the consumer then skips it.

A consumer is the checkpoint location of the downstream query and its ``maxFileAge`` (Spark's
default 7 days). Its files are read from the checkpoint's file-source logs
(``sources/<i>/``, ``checkpoint.file_source_log``): every source whose files lie in this table,
up to the source's offset in the query's last committed batch (``offsets/<N>`` of the newest
``commits/<N>``). A batch that is planned but not committed is re-run from its files by path
after a restart: its files count as unread, so they are never rewritten (and so never deleted).
Each file source of a consumer that reads this table is checked on its own (Spark keeps a
seen-files map and a ``latestTimestamp`` per source). A consumer whose checkpoint cannot be read,
or none of whose sources has read a file of this table yet, stops every rewrite
(``ConsumerFilter.blocked`` says why). The check runs when a rewrite is planned and again right
before the compaction batch's claim (a consumer may have been reset in between). Not supported:
a consumer started with ``latestFirst`` and a file or byte limit (Spark then ignores
``maxFileAge``); its checkpoint does not record its options, but the order in which it admitted
files shows it once it has worked through a backlog (``_newest_first``), and then it stops every
rewrite.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from ...checkpoint.offset_seq import OffsetSeq, file_source_log_offset
from ...checkpoint.reader import SparkCheckpoint
from ...errors import ExactlyOnceError
from ...manifest.entry import ManifestEntry
from ...manifest.paths import canonical_uri
from ...storage import open_storage

log = logging.getLogger("streaming_exactly_once.compaction")

#: Spark's default ``maxFileAge`` of a file source.
DEFAULT_MAX_FILE_AGE_MS = 7 * 86_400_000


@dataclass(frozen=True)
class Consumer:
    """A downstream query: its checkpoint location and its file source's ``maxFileAge``."""

    checkpoint: str
    max_file_age_ms: int = DEFAULT_MAX_FILE_AGE_MS


@dataclass(frozen=True)
class ConsumerFilter:
    """Which live files may be rewritten, as the registered consumers allow."""

    allows: Callable[[ManifestEntry], bool]
    #: why nothing may be rewritten now (a consumer unread, or that has read nothing yet); None: see ``allows``
    blocked: str | None = None


def normalized(uri: str) -> str:
    """A file URI as the manifest and Spark's file source compare: one spelling per location
    (``file:///t``, ``s3://``; ``manifest.paths.canonical_uri``), percent-decoded."""
    return unquote(canonical_uri(uri))


def consumer_filter(consumers: tuple[Consumer, ...], table_uri: str) -> ConsumerFilter:
    """The files of the table at ``table_uri`` (a root as storage spells it: not percent-encoded)
    that every consumer's every file source reading this table has read, below that source's
    horizon (module docstring). Reads each consumer's checkpoint now."""
    if not consumers:
        return ConsumerFilter(allows=lambda entry: True)
    root = canonical_uri(table_uri).rstrip("/") + "/"
    checks: list[tuple[set[str], int]] = []
    for consumer in consumers:
        try:
            sources = _files_read(consumer.checkpoint, root)
        except (OSError, ExactlyOnceError) as exc:
            return _blocked(f"the checkpoint of consumer {consumer.checkpoint} cannot be read ({exc})")
        if not sources:
            return _blocked(f"consumer {consumer.checkpoint} has read no file under {root} yet (or reads it under another name)")
        if any(source.newest_first for source in sources):
            return _blocked(
                f"consumer {consumer.checkpoint} reads the table newest first with a file or byte limit (latestFirst with "
                "maxFilesPerTrigger or maxBytesPerTrigger: its checkpoint lists a batch's files newest first, and a later "
                "batch older files). Spark then ignores its maxFileAge and would read every rewrite as new data: drop "
                "latestFirst, or stop registering it and turn compaction off for this table"
            )
        # Spark keeps one seen-files map and one latestTimestamp per source: each is a consumer of its own
        checks += [(set(source.files), max(source.files.values()) - consumer.max_file_age_ms) for source in sources]

    def allows(entry: ManifestEntry) -> bool:
        path = normalized(entry.path)
        return all(path in seen and entry.modification_time < horizon for seen, horizon in checks)

    return ConsumerFilter(allows=allows)


def _blocked(why: str) -> ConsumerFilter:
    log.warning("compaction rewrites nothing: %s", why)
    return ConsumerFilter(allows=lambda entry: False, blocked=why)


@dataclass(frozen=True)
class _SourceRead:
    """What one file source of a consumer read of the table."""

    #: every file of a committed batch, with its timestamp
    files: dict[str, int]
    #: its log shows Spark's ``latestFirst`` with a file or byte limit (``_newest_first``)
    newest_first: bool


def _newest_first(batches: dict[int, list[int]]) -> bool:
    """Whether a source's batches (its files' timestamps, per source batch, in the order Spark
    admitted them) show ``latestFirst`` with a limit. Spark sorts the listing by timestamp,
    oldest first - newest first under ``latestFirst`` - and logs a batch's files in that order;
    only a limit leaves older files to a later batch. So: a batch with a file older than one an
    earlier batch read, and either a batch that lists its files newest first or (one file a
    batch) two batches each older than the batch before. A consumer that keeps up, one new file
    a trigger, shows none of it: not detected."""
    descending = any(len(set(ts)) > 1 and all(a >= b for a, b in zip(ts, ts[1:], strict=False)) for ts in batches.values())
    backlog, steps_back, newest, previous = False, 0, None, None
    for batch_id in sorted(batches):
        stamps = batches[batch_id]
        backlog = backlog or (newest is not None and min(stamps) < newest)
        steps_back += previous is not None and max(stamps) < min(previous)
        newest, previous = max(stamps) if newest is None else max(newest, *stamps), stamps
    return backlog and (descending or steps_back >= 2)


def _files_read(checkpoint: str, root: str) -> list[_SourceRead]:
    """Per file source of the query at ``checkpoint`` that read files of the table (under
    ``root``): every such file of a batch the query has committed, with its timestamp. A file
    of a batch that is planned (in ``sources/<i>/`` and ``offsets/``) but not committed is not
    read: a restart re-runs that batch from the files by path, so they must stay as they are.
    A source that read only other tables' files is not this table's; one that has committed
    nothing yet lists the table as it is when it starts."""
    spark = SparkCheckpoint(open_storage(checkpoint))
    if not spark.storage.exists("offsets"):
        raise FileNotFoundError(f"{spark.storage.root_uri} is no Spark checkpoint (no offsets/)")
    committed = spark.commit_log.latest_batch_id(refresh=True)
    if committed is None:
        return []
    offsets = spark.offsets(committed)
    if offsets is None:
        raise FileNotFoundError(f"{spark.storage.uri(f'offsets/{committed}')} of committed batch {committed} is missing")
    out: list[_SourceRead] = []
    for source in spark.storage.list_dir("sources"):
        if not source.is_dir:
            continue
        upto = _committed_log_offset(offsets, source.name)
        if upto is None:
            continue
        source_log = spark.source_log(source.name)
        if source_log.latest_batch_id(refresh=True) is None:
            continue
        files: dict[str, int] = {}
        batches: dict[int, list[int]] = {}
        for entry in source_log.all_records():  # a compact file keeps each entry's batch id (and order)
            path = normalized(entry.path)
            if not path.startswith(root):
                continue
            batches.setdefault(entry.batch_id, []).append(entry.timestamp)
            if entry.batch_id <= upto:
                files[path] = entry.timestamp
        if files:
            out.append(_SourceRead(files, _newest_first(batches)))
    return out


def _committed_log_offset(offsets: OffsetSeq, source: str) -> int | None:
    """Source ``source``'s position in its own log at the end of the batch ``offsets`` records
    (a file source's ``{"logOffset":N}``); None for a source that is not a file source or had
    read nothing by then. Offsets log v1 lists sources by ordinal, v2 names them."""
    if offsets.source_ids:
        position = offsets.source_ids.index(source) if source in offsets.source_ids else None
    else:
        position = int(source) if source.isdigit() else None
    if position is None or position >= len(offsets.offsets):
        return None
    return file_source_log_offset(offsets.offsets[position])
