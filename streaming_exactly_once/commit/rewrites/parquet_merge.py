"""The rows of several small Parquet files written as one, exactly as readers read them.

Why a module of its own: which files may share a new file, and how the new file stores its
timestamps, decide whether Spark, our readers, Delta and Iceberg read the same values after a
rewrite (``commit.rewrites.data_compaction`` decides what is rewritten and when).

* **Groups** (``groups``). Files are merged only with files of the same Arrow schema, key-value
  metadata included (Spark's rebase markers and version), and the same timestamp layout (which
  columns are INT96, Spark's default, and which INT64).
* **Timestamps.** INT96 is read as microseconds (Spark's precision; as nanoseconds, dates past
  2262 wrap around). A file of INT96 timestamps only is written as INT96. A file with both INT96
  and INT64 timestamps (Spark's default ``TIMESTAMP`` beside a ``TIMESTAMP_NTZ``, which Spark
  always writes as INT64) cannot keep both in one Arrow writer: its INT96 columns are written as
  INT64 microseconds adjusted to UTC - the instant they hold, which Spark reads as the same
  ``TIMESTAMP``. That holds only where Spark reads both alike, without a calendar rebase: files
  that record a Spark version (3.1 or later writes it) and no legacy INT96 or datetime marker;
  others, and INT96 columns nested in structs, are not merged (``Unmergeable``). Such files are
  read as they will be stored (``read_part``), so they group with the files compaction wrote
  from their like, and a partition keeps one such file, not one per compaction.
* **Checked.** The new file is read back and compared with the rows it replaces, floating-point
  values bit for bit (so a NaN equals itself, and ``-0.0`` stays apart from ``0.0``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

#: Spark's key-value metadata: the version that wrote a file, and the markers of a legacy
#: (Julian calendar) rebase, under which INT96 and INT64 timestamps read differently.
SPARK_VERSION_KEY = b"org.apache.spark.version"
LEGACY_KEYS = (b"org.apache.spark.legacyINT96", b"org.apache.spark.legacyDateTime")


class Unmergeable(Exception):
    """These files cannot be written as one exactly; the message says why."""


@dataclass(frozen=True)
class Part:
    """One small file, read: its rows and how its timestamps are stored."""

    table: Any  # pyarrow.Table
    #: the physical type of each timestamp column, in column order (``INT96`` or ``INT64``)
    layout: tuple[str, ...]
    #: the dotted paths of its INT96 columns
    int96: tuple[str, ...]


def read_part(data: bytes) -> Part:
    """A file's rows (INT96 as microseconds); ``OSError``/``ValueError`` if it is not Parquet. A
    file with both INT96 and INT64 timestamps is read as the new file will store it (module
    docstring), so that it groups with the files compaction wrote from its like."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(pa.BufferReader(data), coerce_int96_timestamp_unit="us")
    schema = parquet.schema
    columns = [schema.column(i) for i in range(len(schema))]
    timestamps = [c for c in columns if c.physical_type == "INT96" or "TIMESTAMP" in str(c.logical_type).upper()]
    part = Part(
        table=parquet.read(),
        layout=tuple(c.physical_type for c in timestamps),
        int96=tuple(c.path for c in timestamps if c.physical_type == "INT96"),
    )
    if set(part.layout) != {"INT96", "INT64"} or _why_not_as_int64(part) is not None:
        return part
    table = part.table
    utc = pa.timestamp("us", tz="UTC")
    for name in part.int96:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, table.schema.field(i).with_type(utc), table.column(i).cast(utc))
    return Part(table=table, layout=tuple("INT64" for _ in part.layout), int96=())


def _why_not_as_int64(part: Part) -> str | None:
    """Why ``part``'s INT96 columns cannot be stored as INT64 microseconds adjusted to UTC with
    the same values for Spark (module docstring); None if they can."""
    metadata = part.table.schema.metadata or {}
    if SPARK_VERSION_KEY not in metadata or any(key in metadata for key in LEGACY_KEYS):
        return "INT96 and INT64 timestamps in a file without Spark's version, or with a legacy calendar marker"
    nested = [path for path in part.int96 if "." in path]
    if nested:
        return f"INT96 timestamps nested in column {nested[0]!r} beside INT64 ones"
    return None


def groups(parts: list[Any]) -> list[list[Any]]:
    """``parts`` (anything with a ``part`` attribute, in order) in groups that may share a new
    file, each in the order given; the groups in the order of their first member."""
    out: list[list[Any]] = []
    for item in parts:
        part = item.part
        for group in out:
            first = group[0].part
            if first.layout == part.layout and first.table.schema.equals(part.table.schema, check_metadata=True):
                group.append(item)
                break
        else:
            out.append([item])
    return out


def merged_file(parts: list[Part]) -> tuple[bytes, int]:
    """One Parquet file (snappy) holding the rows of ``parts`` - one group - in order, and its row
    count; ``Unmergeable`` if it cannot be written or would not read back as those rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    merged = pa.concat_tables([p.table for p in parts])
    merged, options = _timestamp_storage(merged, parts[0])
    buf = io.BytesIO()
    try:
        pq.write_table(merged, buf, compression="snappy", **options)
        data = buf.getvalue()
        written = pq.read_table(pa.BufferReader(data), coerce_int96_timestamp_unit="us")
    except (OSError, ValueError) as exc:  # e.g. nanoseconds that microseconds would truncate
        raise Unmergeable(str(exc)) from exc
    if not same_rows(written, merged):
        raise Unmergeable("the new file would not read back as their rows")
    return data, written.num_rows


def _timestamp_storage(table: Any, part: Part) -> tuple[Any, dict[str, Any]]:
    """The table to write and the writer's options that keep its timestamps as the files stored
    them (module docstring; ``read_part`` has turned what it can of a mixed layout into INT64)."""
    layout = set(part.layout)
    if "INT96" not in layout:
        return table, {}
    if layout == {"INT96"}:
        return table, {"use_deprecated_int96_timestamps": True}
    raise Unmergeable(_why_not_as_int64(part) or "INT96 and INT64 timestamps side by side")


def same_rows(a: Any, b: Any) -> bool:
    """Whether two Arrow tables hold the same rows, floating-point values compared bit for bit."""
    if a.equals(b):
        return True
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    for left, right in zip(a.columns, b.columns, strict=True):
        bits = _bits(left.type)
        try:
            if not left.combine_chunks().view(bits).equals(right.combine_chunks().view(bits)):
                return False
        except (TypeError, ValueError, NotImplementedError):  # pyarrow.ArrowInvalid is a ValueError
            return False
    return True


def _bits(arrow_type: Any) -> Any:
    """``arrow_type`` with each floating-point type replaced by the integer of its width (same layout)."""
    import pyarrow as pa

    t = pa.types
    if t.is_floating(arrow_type):
        return {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[arrow_type.bit_width]
    if t.is_struct(arrow_type):
        return pa.struct([arrow_type.field(i).with_type(_bits(arrow_type.field(i).type)) for i in range(arrow_type.num_fields)])
    if t.is_map(arrow_type):
        return pa.map_(_bits(arrow_type.key_type), arrow_type.item_field.with_type(_bits(arrow_type.item_type)))
    if t.is_large_list(arrow_type):
        return pa.large_list(arrow_type.value_field.with_type(_bits(arrow_type.value_type)))
    if t.is_fixed_size_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_bits(arrow_type.value_type)), arrow_type.list_size)
    if t.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_bits(arrow_type.value_type)))
    return arrow_type
