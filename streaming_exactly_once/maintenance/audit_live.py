"""``seo audit``: does a compact file of the manifest hold exactly what it should?

Readers read the newest compact file and the batch files after it. A compact file ``c`` is the
live files before it, less the files batch ``c``'s compaction replaced (its ledger lists them),
plus batch ``c``'s own files - and, where the table has an entry retention (Spark's ``retention``),
less the entries it expired. An entry it adds beyond that (a replaced file listed again, a line
added by hand) makes readers read rows twice or read another location's; an entry it leaves out
loses that file's rows for every reader, though the file is still on disk. Checked where a whole
audit run reads the live listing anyway (once per compact interval), for each compact file
written since the last run: a fault carried forward into later compact files is found by the run
that first sees it. Costs one more live listing (the state before the compact file) per compact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..errors import ExactlyOnceError
from ..log.compaction import is_compaction_batch
from ..manifest.manifest_log import ManifestLog
from ..table.ledger import NOT_RECORDED, LedgerRecord
from ..table.ledger_checks import Violation


def compacts_to_check(manifest: ManifestLog, newest: int | None, seen: int | None) -> list[int]:
    """The compact files written after ``seen`` (the newest one the last run saw), up to the
    newest batch; without a previous run, the newest compact file alone."""
    if newest is None:
        return []
    k = manifest.interval
    last = (newest + 1) // k * k - 1
    if last < 0:
        return []
    first = last if seen is None else seen + k
    return [c for c in range(max(first, k - 1), last + 1, k) if is_compaction_batch(c, k)]


def held_by_newest(manifest: ManifestLog, compact: int, latest: int, live: list[str], relative: Callable[[str], str]) -> Counter[str]:
    """What the newest compact file holds, from the live listing the run read: the live files
    less those of the batch files after it (fewer than the interval) - one listing saved."""
    held = Counter(live)
    for b in range(compact + 1, latest + 1):
        held.subtract(relative(e.path) for e in manifest.get(b) or [] if not e.is_dir)
    return +held


def compact_violations(
    manifest: ManifestLog, compact: int, ledger: LedgerRecord | None, relative: Callable[[str], str], held: Counter[str] | None = None
) -> tuple[list[Violation], str | None]:
    """What compact file ``compact`` holds (``held``: already known) against the live files
    before it and its batch's ledger; (violations, why the check could not run or None)."""
    if ledger is None:
        return [], None  # the batch's missing ledger is a violation of its own
    try:
        before = Counter(relative(e.path) for e in manifest.files(as_of=compact - 1))
        if held is None:
            held = Counter(relative(e.path) for e in manifest.files(as_of=compact))
    except ExactlyOnceError as exc:
        return [], f"compact file {compact} was not compared with the files before it: {exc}"
    replaced = {path for path, _ in ledger.compaction.replaced} if ledger.compaction is not None else set()
    expected = Counter({path: n for path, n in before.items() if path not in replaced})
    expected.update(f.path for f in (*ledger.files, *ledger.adopted))
    where = manifest.storage.uri(manifest.path(compact))
    out = []
    for path in sorted(p for p in held if not expected[p]):  # a file listed twice is the live-twice check's
        if path in replaced:
            what = f"which batch {compact}'s compaction replaced: readers read its rows twice (here and in the file that replaced it)"
        else:
            what = "which no batch published before it and its own batch did not write: a line another tool or a hand added"
        out.append(
            Violation("files", compact, f"Compact file {where} lists {path}, {what}. Delete its line, or restore the file from a backup.", path=path)
        )
    if ledger.manifest_retention_ms is None:  # no entry retention: nothing else may leave
        for path in sorted(expected - held):
            out.append(
                Violation(
                    "files",
                    compact,
                    f"Compact file {where} leaves out {path}, which was live before it and which no compaction replaced: every "
                    "reader misses its rows, though the file may still be on disk. Restore that file from a backup (seo log "
                    "--batch names the batch that wrote it).",
                    path=path,
                )
            )
    elif ledger.manifest_retention_ms == NOT_RECORDED:
        return out, f"compact file {compact}: files it leaves out are not checked (its ledger predates the retention it was written with)"
    return out, None
