"""Hidden files a killed writer leaves in a table's metadata directories, and which are dead.

Two kinds, both hidden (a leading ``.``: Spark, Arrow and the logs' listings ignore them):

* ``.<name>.<32 hex digits>.tmp`` - the temp sibling a storage with ``writes_temp_siblings``
  (local disk, HDFS) writes before its no-replace rename to ``<name>``
  (``storage.base.temp_sibling_name``). A process killed in between - mid-copy of a 230 MB
  compact file, say - leaves it, and nothing would ever rename or delete it.
* ``.<N>.compact[.e<K>].prep`` - the work file of writer epoch K's next compaction
  (``commit.background.compaction_preparation``; earlier builds left out ``.e<K>``). A writer discards all of
  them when it starts, but the last writer's outlives its clean stop.

Where: the manifest directory and everything under ``_seo`` but the staging area (staged
attempts are judged whole by recovery and ``seo gc``, with their intents). Data directories
get no temp file of ours.

Which are dead (``leftover_files``): the caller holds the table's lease, taken at epoch E when
it created ``_seo/epochs/E``. A leftover last written *before* that file was created is a
previous writer's: no live writer can have it in flight, because every writer but E is fenced.
Files written since are kept whatever they are: the caller's own (its heartbeat, an index the
background thread is writing) or a fenced writer's still running, which the next take-over or
``seo gc`` removes. The caller's own lease files' temp siblings (``epochs/.E.*``,
``heartbeats/.E.*``) and its own work files are never leftovers, whatever the clocks say. The
times compared are both the storage's own modification times, not this host's clock.

Why removing one is safe even when a fenced writer still uses it: a temp file is only ever
renamed, without replacing, by the writer that created it, and a work file only appended to
without creating it (``O_APPEND`` without ``O_CREAT``) and published by such a rename. Once the
file is gone, that writer's rename or append fails with ``FileNotFoundError`` (its write fails,
or its compaction is built from the logs instead): it never publishes anything else. A fenced
writer's WAL claim and commit steps report such a failure as what it is, ``WriterFencedError``
(``commit.protocol.lease.fenced_cause``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from ..log.batch_log import COMPACT_SUFFIX, PREP_SUFFIX
from ..manifest.manifest_log import DIRECTORY as SPARK_MANIFEST_DIR
from ..storage.base import FileInfo, Storage, prepared_files, temp_sibling_target
from .layout import EPOCH_SIDE_DIRS, EPOCHS_DIR, SEO_DIR, STAGING_DIR

_WORK_FILE = re.compile(r"\.[0-9]+" + re.escape(COMPACT_SUFFIX) + r"(?:\.e([0-9]+))?" + re.escape(PREP_SUFFIX))


def lease_taken_ms(storage: Storage, epoch: int) -> int:
    """When epoch ``epoch``'s lease was taken: its epoch file's modification time, by the
    storage's clock (``FileNotFoundError`` once the epoch is pruned: the caller is fenced)."""
    return storage.info(f"{EPOCHS_DIR}/{epoch}").mtime_ms


def _hidden_metadata_files(storage: Storage) -> Iterator[FileInfo]:
    """The hidden files of the metadata directories (both kinds are hidden), sized and timed
    alone: ``_seo/ledger`` holds a file per batch, which a restart must not stat one by one."""
    yield from storage.hidden_files(SPARK_MANIFEST_DIR, recursive=False)
    for entry in storage.list_dir(SEO_DIR):
        if entry.is_dir and entry.path != STAGING_DIR:
            yield from storage.hidden_files(entry.path)
        elif not entry.is_dir and entry.name.startswith("."):
            yield entry


def _owned_by(info: FileInfo, epoch: int | None) -> bool:
    """Whether ``info`` is a temp or work file of writer ``epoch``'s own lease or compaction."""
    if epoch is None:
        return False
    work = _WORK_FILE.fullmatch(info.name)
    if work is not None:  # ``.e<K>``: the owner's epoch (``CompactionPreparation.owner``)
        return work.group(1) == str(epoch)
    directory = info.path.rsplit("/", 1)[0] if "/" in info.path else ""
    return directory in (EPOCHS_DIR, *EPOCH_SIDE_DIRS) and temp_sibling_target(info.name) == str(epoch)


def is_work_file(name: str) -> bool:
    """Whether ``name`` is a compaction work file's (module docstring)."""
    return _WORK_FILE.fullmatch(name) is not None


def _writes_neither(storage: Storage) -> bool:
    """Whether ``storage`` writes neither kind (object stores): nothing to list there."""
    return not storage.writes_temp_siblings and prepared_files(storage) is None


def temp_and_work_files(storage: Storage) -> list[FileInfo]:
    """Every temp and work file (module docstring) in the metadata directories, live or dead.
    Lists those directories; nothing on a storage that writes neither kind (object stores)."""
    if _writes_neither(storage):
        return []
    return [info for info in _hidden_metadata_files(storage) if temp_sibling_target(info.name) is not None or is_work_file(info.name)]


def leftover_files(storage: Storage, *, written_before_ms: int, own_epoch: int | None) -> list[FileInfo]:
    """The temp and work files last written before ``written_before_ms`` by the storage's
    clock, none of them ``own_epoch``'s own (module docstring: which are dead)."""
    return [info for info in temp_and_work_files(storage) if info.mtime_ms < written_before_ms and not _owned_by(info, own_epoch)]


def remove_earlier_writers_files(storage: Storage, epoch: int, *, fence: Callable[[str], None]) -> list[FileInfo]:
    """Delete the ``leftover_files`` of writers before ``epoch`` - the caller's, which holds the
    lease: those last written before its epoch file was created - each after ``fence`` (which
    raises once the caller no longer holds the lease); returns what was deleted."""
    if _writes_neither(storage):
        return []  # not even the epoch file's time is asked for
    fence("delete temp files")
    written_before = lease_taken_ms(storage, epoch)  # FileNotFoundError only if pruned meanwhile: fenced
    removed = []
    for info in leftover_files(storage, written_before_ms=written_before, own_epoch=epoch):
        fence("delete temp files")
        storage.delete(info.path)
        removed.append(info)
    return removed
