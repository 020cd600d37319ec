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
(``sources/<i>/``, ``checkpoint.file_source_log``): every source whose files lie in this table.
A consumer whose checkpoint cannot be read, or that has read nothing of this table yet, stops
every rewrite (``ConsumerFilter.blocked`` says why). Not supported: a consumer started with
``latestFirst`` and a file or byte limit (Spark then ignores ``maxFileAge``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from ..checkpoint.file_source_log import FileSourceLog
from ..errors import ExactlyOnceError
from ..manifest.entry import ManifestEntry
from ..storage import open_storage

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
    """A file URI as the manifest and Spark's file source compare: decoded, ``file:`` with one slash
    (Hadoop's ``Path`` writes ``file:/t``, the manifest ``file:///t``)."""
    uri = unquote(uri)
    if uri.startswith("file:"):
        return "file:/" + uri[len("file:") :].lstrip("/")
    return uri


def consumer_filter(consumers: tuple[Consumer, ...], table_uri: str) -> ConsumerFilter:
    """The files of the table at ``table_uri`` that every consumer has read and that are below its
    horizon (module docstring). Reads each consumer's checkpoint now."""
    if not consumers:
        return ConsumerFilter(allows=lambda entry: True)
    root = normalized(table_uri).rstrip("/") + "/"
    checks: list[tuple[set[str], int]] = []
    for consumer in consumers:
        try:
            seen = _files_read(consumer.checkpoint, root)
        except (OSError, ExactlyOnceError) as exc:
            return _blocked(f"the checkpoint of consumer {consumer.checkpoint} cannot be read ({exc})")
        if not seen:
            return _blocked(f"consumer {consumer.checkpoint} has read no file of this table yet")
        checks.append((set(seen), max(seen.values()) - consumer.max_file_age_ms))

    def allows(entry: ManifestEntry) -> bool:
        path = normalized(entry.path)
        return all(path in seen and entry.modification_time < horizon for seen, horizon in checks)

    return ConsumerFilter(allows=allows)


def _blocked(why: str) -> ConsumerFilter:
    log.warning("compaction rewrites nothing: %s", why)
    return ConsumerFilter(allows=lambda entry: False, blocked=why)


def _files_read(checkpoint: str, root: str) -> dict[str, int]:
    """Every file of the table (under ``root``) that the query at ``checkpoint`` read, with its
    timestamp, from each of its file-source logs."""
    storage = open_storage(checkpoint)
    if not storage.exists("offsets"):
        raise FileNotFoundError(f"{storage.root_uri} is no Spark checkpoint (no offsets/)")
    out: dict[str, int] = {}
    for source in storage.list_dir("sources"):
        if not source.is_dir:
            continue
        source_log = FileSourceLog(storage, source.name)
        if source_log.latest_batch_id(refresh=True) is None:
            continue
        for entry in source_log.all_records():
            path = normalized(entry.path)
            if path.startswith(root):
                out[path] = entry.timestamp
    return out
