"""Tell a re-read of records the table holds from new records at the same offsets.

A partition's offsets name its records only until the topic is deleted and created again: the
new topic numbers its records from 0, so a new query that reads it from ``earliest`` reads new
records at offsets the table holds older ones at. Offsets alone cannot tell that from a
checkpoint recreated over the same records. So when a batch of a query starts below a
partition's high-water mark (``sink.offset_guard``), the sink compares one record per such
partition - the batch's highest offset below the mark - with the row the table holds at the
same ``(topic, partition, offset)``, column by column over the columns that make a record
(``record_columns``; default every column but the offset columns), as the table stores them:

* every column equal: the same record, a re-read - the batch's rows below the mark are dropped;
* every column different: new records - the partition's offsets restarted (a reset, recorded
  with the batch; the table's mark of the partition restarts there) and its rows are written;
* some equal, some different: the sink cannot tell (a column computed anew on every run - a
  timestamp, a uuid - or a recreated topic whose new record happens to agree in some columns):
  the batch is refused with ``OffsetResetError``, naming the columns, before anything is written
  (a null on either side is no evidence: a column added since, or one the batch lacks);
* the table holds no row there (a filter removed it, or its files cannot be read): no evidence
  against the offsets, so the rows below the mark are dropped, as offsets say.

Cost: only a batch that starts below a mark (a recreated checkpoint, a second query) pays it -
the aggregation that finds the probed rows and one filtered read of the table's files.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession, functions as F
from pyspark.sql.types import StructType

from ..table.source_offsets import split_name

log = logging.getLogger("streaming_exactly_once.sink")

#: Reads the table's committed rows with the given schema (None: they cannot be read here).
TableRows = Callable[[SparkSession, StructType], DataFrame | None]

SAME, DIFFERENT, MIXED, UNKNOWN = "same", "different", "mixed", "unknown"


@dataclass(frozen=True)
class ProbeVerdict:
    """How the batch's record at ``offset`` of ``partition`` compares with the table's there."""

    partition: str
    offset: int
    equal: tuple[str, ...] = ()
    differ: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        if not self.equal and not self.differ:
            return UNKNOWN
        if not self.differ:
            return SAME
        return DIFFERENT if not self.equal else MIXED


@dataclass(frozen=True)
class RecordProbe:
    """What the offset guard needs to compare a batch's records with the table's."""

    #: the batch as the table stores it (the schema fit), without dropping a row
    project: Callable[[DataFrame], DataFrame]
    #: reads the table's rows
    table_rows: TableRows
    #: the columns compared (None: every column of the table but the offset columns)
    columns: tuple[str, ...] | None = None

    def compared(self, fitted: DataFrame, offset_columns: Sequence[str]) -> list[str]:
        names = [c for c in fitted.columns if c not in offset_columns] if self.columns is None else list(self.columns)
        return [c for c in names if c in fitted.columns]

    def verdicts(
        self,
        fitted: DataFrame,
        probes: Mapping[str, tuple[int, Row]],
        compared: Sequence[str],
        offset_columns: Sequence[str],
    ) -> dict[str, ProbeVerdict]:
        """Per partition of ``probes`` (partition -> (offset, the batch's values of ``compared``)),
        the comparison with the table's row at that offset."""
        if not probes or not compared:
            return {name: ProbeVerdict(name, offset) for name, (offset, _) in probes.items()}
        held = self._held(fitted, probes, offset_columns)
        out: dict[str, ProbeVerdict] = {}
        for name, (offset, row) in probes.items():
            rows = held.get((name, offset), [])
            out[name] = _compare(name, offset, row.asDict(recursive=True), rows, compared)
        return out

    def _held(
        self, fitted: DataFrame, probes: Mapping[str, tuple[int, Row]], offset_columns: Sequence[str]
    ) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """The table's rows at the probed coordinates (none, if the table cannot be read)."""
        topic, partition, offset = offset_columns
        try:
            table = self.table_rows(fitted.sparkSession, fitted.schema)
            if table is None:
                return {}
            wanted: Column | None = None
            for name, (at, _) in probes.items():
                t, p = split_name(name)
                one = (F.col(topic).cast("string") == F.lit(t)) & (F.col(partition).cast("string") == F.lit(str(p))) & (F.col(offset) == F.lit(at))
                wanted = one if wanted is None else wanted | one
            rows = table.where(wanted).collect() if wanted is not None else []
        except Exception as exc:  # noqa: BLE001 - no evidence then: offsets decide, as before
            log.warning("the table's records at the re-read offsets could not be read (%s): offsets decide", exc)
            return {}
        out: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for row in rows:
            values = row.asDict(recursive=True)
            key = (f"{values[topic]}/{values[partition]}", int(values[offset]))
            out.setdefault(key, []).append(values)
        return out


def _compare(name: str, offset: int, batch: Mapping[str, Any], held: Iterable[Mapping[str, Any]], compared: Sequence[str]) -> ProbeVerdict:
    """The verdict against the closest of the table's rows there (most columns equal). A null
    on either side says nothing: a column added to the table since the row was written reads
    null there, and one the batch lacks is filled with null."""
    best: ProbeVerdict | None = None
    for row in held:
        both = [c for c in compared if row.get(c) is not None and batch.get(c) is not None]
        equal = tuple(c for c in both if _same(batch[c], row[c]))
        differ = tuple(c for c in both if not _same(batch[c], row[c]))
        if best is None or len(equal) > len(best.equal):
            best = ProbeVerdict(name, offset, equal, differ)
    return best if best is not None else ProbeVerdict(name, offset)


def _same(a: Any, b: Any) -> bool:
    """Equal values, a NaN equal to a NaN (nested values compared alike)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def describe_mismatch(verdicts: Iterable[ProbeVerdict]) -> str:
    """``t/0 at offset 29: 'body' differs, 'ingested' equal`` - for error messages."""
    parts = []
    for v in sorted(verdicts, key=lambda v: split_name(v.partition)):
        differ = ", ".join(repr(c) for c in v.differ)
        equal = ", ".join(repr(c) for c in v.equal)
        parts.append(f"{v.partition} at offset {v.offset}: {differ} differ(s), {equal} equal")
    return "; ".join(parts)
