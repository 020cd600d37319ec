"""Small data files of earlier batches rewritten into one, published by a compaction batch.

``docs/design/data-compaction.md`` has the reader-by-reader analysis. In short: Spark's batch
reader takes a ``.compact`` manifest file as the whole listing, so a replacement can only take
effect there; the batch that writes ``M.compact`` also publishes the rewrites planned here, in
its own claim (``TableCommitter.commit``): the new file is staged in the background
(``commit.rewrites.rewrite_preparation``) and moved like the batch's files, ``M.compact`` lists it
instead of the files it replaces, and a Delta commit removes them and adds it with
``dataChange`` false.

What is rewritten (``plan``): Parquet files of one directory (a partition) that received no
file for ``quiet_period_ms``, each smaller than half the target size and stamped at least
``min_age_ms`` before the newest live file of the table, less the table's longest pause since
(``age_floor``: by the entries' ``modificationTime``, the table's own clock, not the wall clock -
a caught-up file-source reader skips the new file only if its timestamp is below the newest file
it read minus its ``maxFileAge``, and an idle table's files do not age), at least ``min_files`` of them, oldest first, up to the target size
per new file and ``max_bytes`` per compaction batch. The caller leaves out files the manifest's
``retention`` is about to drop. Entries under an earlier root of a table that was moved or
copied (``TableIdentity.root_uris``) are rewritten like the others.

The new file (``write``) holds the rows of the replaced files, in their order: the largest
group of the candidate's files that ``commit.rewrites.parquet_merge`` may write as one (same Arrow
schema, key-value metadata and timestamp layout), read back and compared with the rows it
replaces before it is staged; a rewrite that does not compare equal is left out, never the
batch. A file that cannot join its neighbours is left out of the writer's later plans (and
logged), so that it does not stop its partition's compaction for good. Its manifest entry's
``modificationTime`` is the newest of the replaced files', at least ``min_age_ms`` below the
table's newest file, so a downstream file-source query that has read the newest file skips it
when its ``maxFileAge`` is below ``min_age_ms`` (the design page derives it).

On disk: the WAL's ``manifest`` step lists the replaced files' manifest paths (``replaced``),
its ``move`` step moves the new files, and a Delta table's ``delta`` step carries the
``Rewrite`` records below (``rewrites``).
"""

from __future__ import annotations

import datetime
import itertools
import logging
import posixpath
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field as dc_field
from typing import Any

from ...log.codec import RecordError, non_negative
from ...log.record_fields import json_field
from ...manifest.entry import ManifestEntry
from ...manifest.manifest_log import ManifestLog
from ...manifest.paths import relative_to_root
from ...storage.base import Storage
from ..table_steps.format_step_fields import inside, inside_field
from .compaction_consumers import Consumer
from .parquet_merge import Part, Unmergeable, groups, merged_file, read_part

log = logging.getLogger("streaming_exactly_once.compaction")

#: The new files' names: Spark's ``part-`` prefix (so every reader's listing rules take them)
#: and a marker that says which compaction batch they were planned for.
NAME = "part-compacted-{batch}-{n:05d}-{uid}.snappy.parquet"
#: Under a staging directory (``commit.rewrites.rewrite_preparation``): the new files before their move.
STAGING_SUBDIR = "rewrite"
#: A file that the manifest's ``retention`` drops this soon is not rewritten (the compact file
#: is written after the plan; the rows of a file it drops must not live on in a new one).
RETENTION_MARGIN_MS = 60_000


@dataclass(frozen=True)
class CompactionPolicy:
    """What a compaction batch rewrites (module docstring); sizes in bytes, ages in ms."""

    target_size: int = 128 << 20
    min_files: int = 8
    min_age_ms: int = 8 * 86_400_000
    max_bytes: int = 128 << 20
    #: a partition that received a file this recently is left alone (0: every partition)
    quiet_period_ms: int = 0
    #: downstream file-source queries whose checkpoints say which files may be rewritten
    #: (``commit.rewrites.compaction_consumers``)
    consumers: tuple[Consumer, ...] = ()


def _replaced(items: list[Any]) -> list[tuple[str, int]]:
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)):
            raise RecordError("field 'replaced' must hold [path, size] pairs")
        out.append((inside(item[0]), non_negative(item[1], "replaced")))
    return out


@dataclass(frozen=True)
class Rewrite:
    """One new file and the files it replaces, by path relative to the table. In a WAL entry
    (``CommitDelta``'s ``rewrites``)::

        {"final":"p=a/part-compacted-8-00000-<uuid>.snappy.parquet","size":2410,"mtime":1795313165250,"rows":40,
         "replaced":[["p=a/part-00000-<uuid>.c000.snappy.parquet",903],...]}
    """

    final: str = dc_field(metadata=json_field("final", str, check=inside_field))
    size: int = dc_field(metadata=json_field("size", int, check=non_negative))
    mtime_ms: int = dc_field(metadata=json_field("mtime", int))
    rows: int = dc_field(metadata=json_field("rows", int, check=non_negative))
    replaced: list[tuple[str, int]] = dc_field(
        default_factory=list, metadata=json_field("replaced", list, encode=lambda v: [[p, n] for p, n in v], decode=_replaced)
    )


@dataclass(frozen=True)
class Candidate:
    """A group ``plan`` chose: files of one directory, each its entry and table-relative path."""

    directory: str
    files: tuple[tuple[ManifestEntry, str], ...]
    #: whether it holds every eligible file of its directory (else the target size or the
    #: budget cut it short, and the next plan starts from the same files)
    complete: bool = True


@dataclass(frozen=True)
class StagedRewrite:
    """A rewrite written under a staging directory, not yet claimed."""

    rewrite: Rewrite
    staged: str
    #: the replaced files' manifest entries (as the manifest spells them)
    replaced_entries: tuple[ManifestEntry, ...]

    @property
    def replaced_paths(self) -> list[str]:
        return [entry.path for entry in self.replaced_entries]

    def entry(self, storage: Storage) -> ManifestEntry:
        """The new file's manifest entry."""
        return ManifestEntry.for_file(storage.uri(self.rewrite.final), size=self.rewrite.size, modification_time=self.rewrite.mtime_ms)


def kept_by_retention(manifest: ManifestLog, now_ms: int) -> Callable[[ManifestEntry], bool]:
    """Whether an entry may be rewritten: not one the manifest's ``retention`` drops within
    ``RETENTION_MARGIN_MS`` (its rows must not live on in a new file)."""
    retain = manifest.retain
    return lambda entry: retain is None or retain(entry, now_ms + RETENTION_MARGIN_MS)


def rewritable(manifest: ManifestLog, as_of: int | None, now_ms: int) -> list[ManifestEntry]:
    """The live listing as of ``as_of`` (None: the latest) that may be rewritten."""
    if as_of is not None and as_of < 0:
        return []
    kept = kept_by_retention(manifest, now_ms)
    return [entry for entry in manifest.files(as_of=as_of) if kept(entry)]


@dataclass
class PlanNotes:
    """Why ``plan`` chose what it chose: counts of the live data files it passed over, by reason
    (``seo compact`` says why there is nothing to compact)."""

    #: the newest timestamp of any live file: the table's own clock, which ``min_age`` is measured on
    newest_ms: int | None = None
    #: the longest gap between live files' timestamps that the age floor was lowered by (``age_floor``)
    gap_ms: int = 0
    small: int = 0
    too_young: int = 0
    not_eligible: int = 0
    outside: int = 0
    quiet: int = 0

    def why_nothing(self, policy: CompactionPolicy) -> str:
        """One sentence for a plan that chose nothing."""
        if self.newest_ms is None:
            return "the table has no live data file"
        if not self.small and not self.outside:
            return f"no live Parquet file is smaller than half the target size ({policy.target_size} bytes)"
        parts = [f"of {self.small} small file(s)"]
        if self.too_young:
            pause = f" plus the table's longest pause in that time ({_seconds(self.gap_ms)})" if self.gap_ms else ""
            parts.append(
                f"{self.too_young} were written less than min_age ({_seconds(policy.min_age_ms)}){pause} before the table's newest "
                f"file, {_utc(self.newest_ms)} (min_age is measured between the files' own timestamps, not on the clock: the files "
                "of an idle table do not age; a smaller min_age is safe when no downstream query reads the table as a file source)"
            )
        if self.not_eligible:
            parts.append(f"{self.not_eligible} are held back by a registered consumer or were left alone as unmergeable")
        if self.quiet:
            parts.append(f"{self.quiet} are in partitions still inside their quiet period")
        left = self.small - self.too_young - self.not_eligible - self.quiet
        parts.append(f"{left} are left, fewer than min_files ({policy.min_files}) in every partition")
        if self.outside:
            parts.append(f"and {self.outside} live file(s) lie outside every root the table was written under (seo verify names them)")
        return ", ".join(parts)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g}s"


def _utc(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def table_relative(roots: Sequence[str], uri: str) -> str | None:
    """``uri`` relative to the first of ``roots`` it lies below (a table copied or moved keeps
    its entries under the root it was written at: ``TableIdentity.root_uris``); None if it lies
    below none of them, or climbs out of one with ``..``."""
    for root in roots:
        rel = relative_to_root(root, uri)
        if rel is not None:
            return rel if rel and posixpath.normpath(rel) == rel and not rel.startswith("../") else None
    return None


def age_floor(stamps: Sequence[int], min_age_ms: int, notes: PlanNotes) -> int | None:
    """The newest timestamp a rewritten file may carry (None: no file may be rewritten); notes
    the table's newest timestamp and the gap it was lowered by.

    On the table's own clock: a downstream file-source query skips the new file only if its
    timestamp is below (the newest file it read - its maxFileAge), whatever time it is. A query
    whose ``maxFileAge`` is ``m < min_age`` and that keeps up has read every file stamped up to
    ``newest - (min_age - m)``; its horizon is the newest such file, which is ``newest - min_age
    + m`` only if the table has a file there. A pause leaves none: the horizon falls back to the
    last file before it. So the floor is ``newest - min_age`` less the longest gap between
    consecutive live files from the last file at or below ``newest - min_age`` on
    (``docs/design/data-compaction.md`` derives it for every ``m``)."""
    notes.newest_ms = max(stamps)
    start = notes.newest_ms - min_age_ms
    below = max((ts for ts in stamps if ts <= start), default=None)
    if below is None:
        return None
    window = sorted({below, *(ts for ts in stamps if ts > start)})
    notes.gap_ms = max((b - a for a, b in itertools.pairwise(window)), default=0)
    return start - notes.gap_ms


def plan(
    storage: Storage,
    live: Sequence[ManifestEntry],
    policy: CompactionPolicy,
    *,
    now_ms: int,
    eligible: Callable[[ManifestEntry], bool] | None = None,
    roots: Sequence[str] = (),
    notes: PlanNotes | None = None,
) -> list[Candidate]:
    """The groups worth a rewrite in the live listing ``live`` (module docstring); ``eligible``:
    what else a file must pass (the registered consumers' rule); ``roots``: other roots the
    table's entries may lie under (it was moved or copied); ``notes``: filled with what was
    passed over, and why."""
    notes = PlanNotes() if notes is None else notes
    files_only = [entry for entry in live if not entry.is_dir]
    if not files_only:
        return []
    floor = age_floor([entry.modification_time for entry in files_only], policy.min_age_ms, notes)
    small = policy.target_size // 2
    by_dir: dict[str, list[tuple[ManifestEntry, str]]] = {}
    newest: dict[str, int] = {}  # per directory, its newest file of any size
    for entry in files_only:
        rel = table_relative((storage.root_uri, *roots), entry.uri)
        if rel is None:
            notes.outside += 1
            continue
        if not rel.endswith(".parquet") or rel.startswith(("_", ".")):
            continue
        directory = posixpath.dirname(rel)
        newest[directory] = max(newest.get(directory, entry.modification_time), entry.modification_time)
        if entry.size >= small:
            continue
        notes.small += 1
        if floor is None or entry.modification_time > floor:
            notes.too_young += 1
        elif eligible is not None and not eligible(entry):
            notes.not_eligible += 1
        else:
            by_dir.setdefault(directory, []).append((entry, rel))
    out: list[Candidate] = []
    budget = policy.max_bytes
    for directory in sorted(by_dir):
        if policy.quiet_period_ms and newest[directory] > now_ms - policy.quiet_period_ms:
            notes.quiet += len(by_dir[directory])
            continue  # still receiving data
        files = sorted(by_dir[directory], key=lambda f: (f[0].modification_time, f[1]))
        while len(files) >= policy.min_files and budget > 0:
            chosen: list[tuple[ManifestEntry, str]] = []
            size = 0
            for entry, rel in files:
                if chosen and (size + entry.size > policy.target_size or size + entry.size > budget):
                    break
                chosen.append((entry, rel))
                size += entry.size
            if len(chosen) < policy.min_files:
                break
            out.append(Candidate(directory, tuple(chosen), complete=len(chosen) == len(files)))
            budget -= size
            files = files[len(chosen) :]
    return out


@dataclass(frozen=True)
class _Read:
    """A file of the candidate, read."""

    entry: ManifestEntry
    rel: str
    part: Part


def write(
    storage: Storage,
    candidate: Candidate,
    *,
    staging_dir: str,
    batch_id: int,
    n: int,
    min_files: int = 2,
    staging: Storage | None = None,
    left_out: Callable[[ManifestEntry, str], None] | None = None,
) -> StagedRewrite | None:
    """Write the rows of the largest group of ``candidate``'s files that may share one file
    (``commit.rewrites.parquet_merge``: same schema, key-value metadata and timestamp layout; ties: the
    group of the newest file) into one file under ``staging_dir`` of ``staging`` (default: the
    table's ``storage``), durably; it replaces exactly the files it holds. None when that group
    has fewer than ``min_files``, or its rows cannot be written back exactly (the rewrite is
    then left out, never the batch).

    ``left_out(entry, why)`` is told of each file that will not be merged with its neighbours:
    one that does not read as Parquet, one of a group smaller than the chosen one that has
    fewer than ``min_files`` (a file from before ``schema_evolution`` added a column, another
    writer's rebase marker; on a tie, the groups without the newest file, if the candidate was
    cut short), and every file of a group whose rows do not write back. The caller leaves them out of its
    next plans, so that one such file does not stop its partition's compaction for good."""
    where = storage.uri(candidate.directory or ".")
    tell = left_out or (lambda entry, why: None)
    read: list[_Read] = []
    for entry, rel in candidate.files:
        try:
            read.append(_Read(entry, rel, read_part(storage.read_bytes(rel))))
        except (OSError, ValueError) as exc:
            tell(entry, f"it does not read as Parquet ({exc})")
    if not read:
        return None
    grouped = groups(read)
    newest = max(read, key=lambda r: (r.entry.modification_time, r.rel))
    chosen = max(grouped, key=lambda g: (len(g), newest in g))
    for group in grouped:
        # a group as large as the chosen one may grow with the next files - unless the next plan
        # starts from these same files (the candidate was cut short)
        if group is not chosen and len(group) < max(2, min_files) and (len(group) < len(chosen) or not candidate.complete):
            for r in group:
                tell(r.entry, f"its schema, key-value metadata or timestamp layout differs from the {len(chosen)} files beside it")
    if len(chosen) < max(2, min_files):
        return None
    try:
        data, rows = merged_file([r.part for r in chosen])
    except Unmergeable as exc:
        log.warning("compaction leaves %d files of %s alone: %s", len(chosen), where, exc)
        for r in chosen:
            tell(r.entry, str(exc))
        return None
    name = NAME.format(batch=batch_id, n=n, uid=uuid.uuid4().hex)
    final = posixpath.join(candidate.directory, name) if candidate.directory else name
    staged = f"{staging_dir}/{STAGING_SUBDIR}/{final}"
    (staging or storage).put_if_absent(staged, data)
    rewrite = Rewrite(
        final=final,
        size=len(data),
        mtime_ms=max(r.entry.modification_time for r in chosen),
        rows=rows,
        replaced=[(r.rel, r.entry.size) for r in chosen],
    )
    return StagedRewrite(rewrite, staged, tuple(r.entry for r in chosen))
