"""``seo verify``'s checks of the rewrites compaction batches published (``commit.rewrites.data_compaction``).

A compaction batch's commit record names each new file, its row count and the files it replaced
(``table.commits_log``). While that record is retained (the commits log's compact file of the
batch is still there), verify checks what a broken replacement would do to readers:

* ``replaced-file-live``: the live listing names a new file and a file it replaced - readers see
  those rows twice;
* ``rewrite-rows``: the new file's footer does not hold the recorded rows, or the replaced files
  that are still on disk hold a different number - rows were lost or made up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..log.compaction import is_compaction_batch
from ..readers.committed_files import CommittedFiles
from ..storage.base import Storage
from ..storage.parquet_footer import read_footer
from ..table.commits_log import CommitsLog, RewriteNote

#: How a finding is told: severity, kind, the file's URI, what is wrong.
Report = Callable[[str, str, str, str], None]


def published_rewrites(commits: CommitsLog) -> Iterator[tuple[int, RewriteNote]]:
    """(batch, rewrite) for every rewrite of a retained compaction batch's own commit record."""
    for batch_id in commits.list_batch_ids():
        if not is_compaction_batch(batch_id, commits.interval):
            continue
        for record in commits.get(batch_id) or []:
            if record.batch_id == batch_id:
                yield from ((batch_id, note) for note in record.rewrites)


def check_rewrites(storage: Storage, commits: CommitsLog, current: CommittedFiles, add: Report) -> int:
    """Check every retained rewrite against the live listing ``current`` and the files' footers
    (module docstring); returns how many were checked."""
    live = set(current.relative)
    checked = 0
    for batch_id, note in published_rewrites(commits):
        checked += 1
        uri = storage.uri(note.final)
        both = [path for path in note.replaced if path in live]
        if note.final in live and both:
            add(
                "error",
                "replaced-file-live",
                uri,
                f"compaction batch {batch_id} replaced {storage.uri(both[0])} (and {len(both) - 1} more) with this file, but the "
                "live listing names both: readers see their rows twice. Restore the manifest from a backup, or report it.",
            )
        rows = _rows(storage, note.final)
        if rows is not None and rows != note.rows:
            add("error", "rewrite-rows", uri, f"holds {rows} rows; compaction batch {batch_id} recorded {note.rows}")
        before = [_rows(storage, path) for path in note.replaced]
        if before and all(n is not None for n in before) and sum(n for n in before if n is not None) != note.rows:
            add(
                "error",
                "rewrite-rows",
                uri,
                f"the {len(before)} files compaction batch {batch_id} replaced with it hold {sum(n for n in before if n is not None)} "
                f"rows; it holds {note.rows}",
            )
    return checked


def _rows(storage: Storage, path: str) -> int | None:
    """The rows in the footer of the Parquet file at ``path``; None if it is gone or unreadable."""
    try:
        metadata = read_footer(storage, path)
    except FileNotFoundError:
        return None
    return None if metadata is None else int(metadata.num_rows)
