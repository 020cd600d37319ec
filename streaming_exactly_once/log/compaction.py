"""Pure batch-id arithmetic of compactible logs, with Spark's exact semantics.

With compact interval ``k``, batch ``id`` is a compaction batch when ``(id + 1) % k == 0``
and its file is ``<id>.compact``, holding every surviving record of the previous compact
file, the deltas after it, and its own. Example, k = 3::

    0  1  2.compact  3  4  5.compact  6  7
                                      ^^^^ latest = 7: a reader reads 5.compact, 6, 7

Spark never stores ``k``: every reader and writer re-derives it from the ``.compact`` file
names (``derive_compact_interval``). A writer that wants Spark readers to agree with it must
keep at least two ``.compact`` files (then ``k`` is their difference) and pick ``k`` no larger
than the readers' default (``spark.sql.streaming.fileSink.log.compactInterval``, 10):
``interval_is_spark_safe`` checks this and ``deletable_below`` never leaves fewer than two.
"""

from __future__ import annotations

from collections.abc import Iterable


def is_compaction_batch(batch_id: int, interval: int) -> bool:
    return (batch_id + 1) % interval == 0


def valid_batches_before_compaction(compaction_id: int, interval: int) -> range:
    """What compaction batch ``compaction_id`` merges besides its own records.

    The previous compact file and the deltas after it, e.g. k=3, id=5 -> 2, 3, 4.
    """
    if not is_compaction_batch(compaction_id, interval):
        raise ValueError(f"{compaction_id} is not a compaction batch for interval {interval}")
    return range(max(0, compaction_id - interval), compaction_id)


def all_valid_batches(latest: int, interval: int) -> range:
    """The files a reader needs for the state as of ``latest``: last compact + deltas after it."""
    if latest < 0:
        raise ValueError("batch ids start at 0")
    start = max(0, (latest + 1) // interval * interval - 1)
    return range(start, latest + 1)


def next_compaction_batch(batch_id: int, interval: int) -> int:
    """The first compaction batch strictly after ``batch_id``."""
    return (batch_id + interval + 1) // interval * interval - 1


def derive_compact_interval(default: int, latest_compact_id: int) -> int:
    """Spark's guess of ``k`` when exactly one ``.compact`` file (``latest_compact_id``) exists."""
    n = latest_compact_id + 1
    if n <= default:
        return n
    if default < n // 2:
        for candidate in range(default, n // 2 + 1):
            if n % candidate == 0:
                return candidate
        return n
    return n


def interval_from_file_names(compact_ids: Iterable[int], default: int) -> int:
    """``k`` as Spark derives it from the ids of the ``.compact`` files present."""
    ids = sorted(set(compact_ids), reverse=True)
    if len(ids) >= 2:
        return ids[0] - ids[1]
    if len(ids) == 1:
        return derive_compact_interval(default, ids[0])
    return default


def interval_is_spark_safe(interval: int, reader_default: int = 10) -> bool:
    """Whether Spark readers with ``reader_default`` derive ``interval`` at every stage.

    Before the first compact file they use ``reader_default`` to name files, so ``interval``
    must not exceed it; with one compact file (id ``interval - 1``) they derive
    ``derive_compact_interval(reader_default, interval - 1)``, which must give ``interval``.
    """
    return 1 <= interval <= reader_default and derive_compact_interval(reader_default, interval - 1) == interval


def deletable_below(current: int, interval: int, min_batches_to_retain: int) -> int | None:
    """Batch files with id below the returned id may be deleted after batch ``current``.

    Spark keeps the compact file covering ``current + 1 - min_batches_to_retain`` and every
    later file. We additionally keep the compact file before the latest one, so that at least
    two ``.compact`` files always remain and every reader derives ``interval`` correctly.
    Returns None when nothing may be deleted yet.
    """
    if interval > current + 1 - min_batches_to_retain:
        return None
    min_batch = current + 1 - min_batches_to_retain
    keep_from = min_batch - (min_batch % interval) - 1  # a compaction batch id (or -1)
    latest_compact = (current + 1) // interval * interval - 1
    second_latest_compact = latest_compact - interval
    keep_from = min(keep_from, second_latest_compact)
    return keep_from if keep_from > 0 else None
