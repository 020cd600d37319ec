"""A new table's directory that already holds files: refused, or its Parquet files adopted as batch 0.

A table is what its manifest lists. Files in the directory before its first batch - a batch
job's output, files pandas or another tool wrote - are in no manifest, so the first batch would
hide them from every reader of the table (vanilla ``spark.read.parquet`` honours
``_spark_metadata`` too), and none of the table's records would show them to be anyone's data.
So a writer opening a table that has no batch yet lists the directory, and a file a reader of
the plain directory would read (no part of its path starts with ``_`` or ``.``: Spark, Arrow and
Hive skip those) stops it with ``ExistingFilesError`` naming one, before it writes anything - a
directory the library never touched is checked before the lease is taken.

``adopt_existing_files=True`` makes those files the table's: they are published as a batch of
their own, batch 0 - its manifest entry, and its Delta commit and Iceberg snapshot when the table
has those formats - under ``ADOPTION_QUERY`` (``table.library_queries``), committed right before
the stream's first batch stages anything (``TableCommitter.adopt_existing``). A crash before its
claim adopts nothing, after it the batch rolls forward. Its own batch, not the first batch's:
until a table has a manifest, a plain reader of the directory (vanilla Spark) reads every file in
it, so the stream's first files must not land there before the manifest does. Checked before the
claim (a refusal names the file; nothing is written):

* Parquet files only (the table's files are Parquet: ``parquet``, ``delta``, ``iceberg``), each
  a complete Parquet file whose every column Spark can read (``table.parquet_schema``);
* laid out as the sink lays out its own: ``<col>=<value>/`` directories for exactly the table's
  ``partition_by`` columns, in that order, and no partition column inside the file;
* one schema for all of them. It becomes the table's schema (a schema record ``adopt``, as for
  an adopted Delta table), the partition columns' types taken from the stream's; the stream is
  checked against it at ``start`` and at every batch by the usual rules (``schema_evolution``
  decides whether the stream may have columns the files lack: their rows read null there).

The directory is listed again right before the adoption's claim, and what is there then is
adopted (files added or removed since the writer opened the table included). Once the adoption
has committed the table has a manifest and the option does nothing: leaving it on is harmless, a
restart adopts nothing twice. Adopted files are the table's from then on: a
compaction may rewrite them, and ``seo gc`` deletes them once a compaction batch left them out
of the listing (``manifest.retired``).

Not here: a table of this library, a table of Spark's own file sink (its ``_spark_metadata``
and history are taken over, ``commit.writer``), and an existing Delta or Iceberg table opened
with its format (that format's live files are batch 0's, ``TableCommitter._adopted_entries``).
"""

from __future__ import annotations

import datetime
import json
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..delta.files import DeltaFile
from ..errors import ConfigError, ExistingFilesError, IcebergTableError, SchemaMismatchError
from ..iceberg.files import IcebergFile, staged_rows
from ..manifest.entry import ManifestEntry
from ..manifest.paths import parse_partition_dir
from ..storage.base import FileInfo, Storage
from ..storage.io_threads import map_waiting
from ..storage.parquet_footer import read_footer
from ..table.layout import is_hidden
from ..table.parquet_schema import UnreadableColumn, spark_schema_json
from ..table.schema_rules import fields_of

#: How many file names a refusal lists besides the one it names.
_SHOWN = 3


@dataclass(frozen=True)
class AdoptedFile:
    """One existing file batch 0 publishes: ``path`` relative to the table, its rows from its footer."""

    path: str
    size: int
    mtime_ms: int
    rows: int


@dataclass(frozen=True)
class Adoption:
    """The files a table adopts as its batch 0, and their schema (Spark JSON, without partition columns)."""

    files: tuple[AdoptedFile, ...]
    schema: str
    #: the URI of one of them, for messages ("the existing files it adopts, e.g. ...")
    example: str

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def entries(self, storage: Storage) -> list[ManifestEntry]:
        return [ManifestEntry.for_file(storage.uri(f.path), size=f.size, modification_time=f.mtime_ms) for f in self.files]

    def delta_files(self) -> list[DeltaFile]:
        return [DeltaFile(f.path, f.size, f.mtime_ms, f.rows) for f in self.files]

    def iceberg_files(self) -> list[IcebergFile]:
        return [IcebergFile(f.path, f.size, f.mtime_ms, f.rows) for f in self.files]

    def source(self) -> str:
        """Where the table's schema comes from until the first batch records it."""
        return f"the existing files it adopts, e.g. {self.example}"


def readable_files(storage: Storage, *, skip: Sequence[str] = ()) -> list[FileInfo]:
    """Every file a reader of the plain directory reads (no part of its path starts with ``_``
    or ``.``), but those under the directories ``skip`` (``metadata/`` of an Iceberg table)."""
    found = (f for f in storage.walk_files() if not is_hidden(f.path) and not f.path.startswith(tuple(skip)))
    return sorted(found, key=lambda f: f.path)


def existing_files_error(storage: Storage, files: Sequence[FileInfo], *, adoptable: bool = True) -> ExistingFilesError:
    """The refusal of a directory holding ``files`` (module docstring); ``adoptable`` False for
    a dataset group's root, which adopts no files (``DatasetSink`` refuses the option)."""
    first = storage.uri(files[0].path)
    more = [f.path for f in files[1 : 1 + _SHOWN]]
    others = f" (and {', '.join(more)}{', ...' if len(files) > 1 + _SHOWN else ''})" if more else ""
    remedy = (
        "To make them the table's first batch, pass adopt_existing_files=True (Parquet files laid out by the table's "
        "partition columns; their schema is checked against the stream's); otherwise write the table to an empty "
        "directory, or move the files away."
        if adoptable
        else "A dataset group adopts no files: move them away, or write the group to an empty directory (an "
        "ExactlyOnceSink adopts Parquet files into a table of their own)."
    )
    return ExistingFilesError(
        f"Table {storage.root_uri} has no batch yet, but its directory holds {len(files)} file(s) that readers of it "
        f"would read, e.g. {first}{others}: another tool's, or a batch job's output. The table's manifest would hide "
        "their rows from every reader of the table, vanilla Spark included, and nothing would show them to be data. "
        f"Nothing was written. {remedy}",
        table=storage.root_uri,
        files=len(files),
        example=first,
        key="adopt_existing_files",
    )


def plan_adoption(storage: Storage, files: Sequence[FileInfo], *, file_format: str, partition_by: Sequence[str]) -> Adoption:
    """What batch 0 adopts of ``files``, each checked (module docstring); ``ConfigError`` or
    ``SchemaMismatchError`` naming the first file that cannot be adopted."""
    root = storage.root_uri
    if file_format != "parquet":
        raise ConfigError(
            f"Table {root}: adopt_existing_files adopts Parquet files, whose footers say what they hold; this table's "
            f"files are {file_format!r}. Write the table to an empty directory, or convert the files to Parquet first.",
            table=root,
            key="adopt_existing_files",
        )
    for info in files:
        _check_layout(storage, info.path, partition_by)

    def read(info: FileInfo) -> tuple[FileInfo, int, str]:
        metadata = read_footer(storage, info.path)
        if metadata is None:
            raise _cannot(storage, info.path, "is not a complete Parquet file, so it cannot be adopted as the table's data", "complete it")
        try:
            return info, int(metadata.num_rows), spark_schema_json(metadata)
        except UnreadableColumn as exc:
            why = f"has {exc}, so Spark could not read the table once it is adopted"
            raise _cannot(storage, info.path, why, "rewrite it (e.g. pyarrow's coerce_timestamps='us')") from None

    footers = map_waiting(f"adopt-{root}", read, files)
    first_info, _, schema = footers[0]
    for info, _, other in footers:
        _check_same_schema(storage, (first_info.path, schema), (info.path, other), partition_by)
    adopted = tuple(AdoptedFile(info.path, info.size, info.mtime_ms, rows) for info, rows, _ in footers)
    return Adoption(adopted, schema, storage.uri(first_info.path))


def _cannot(storage: Storage, path: str, why: str, fix: str) -> ConfigError:
    """The refusal of one file that cannot be adopted: which, why, and what to do instead."""
    return ConfigError(
        f"Table {storage.root_uri}: {storage.uri(path)} {why}. Nothing was written. Move the file out of the table's "
        f"directory, or {fix}, and start again.",
        table=storage.root_uri,
        key="adopt_existing_files",
        path=storage.uri(path),
    )


def _check_layout(storage: Storage, path: str, partition_by: Sequence[str]) -> None:
    """``path``'s directories are exactly ``<col>=<value>`` for the partition columns, in order."""
    directory = posixpath.dirname(path)
    parts = directory.split("/") if directory else []
    pairs = parse_partition_dir(directory)
    if len(parts) == len(partition_by) and [c for c, _ in pairs] == list(partition_by):
        return
    want = "/".join(f"{c}=<value>" for c in partition_by)
    raise ConfigError(
        f"Table {storage.root_uri}: {storage.uri(path)} is not laid out as the table's files are "
        f"(<table>/{want + '/' if want else ''}<file>, partition_by={list(partition_by)}), so readers could not tell its "
        "partition values. Nothing was written. Give the table the files' partition columns, or move the file.",
        table=storage.root_uri,
        key="adopt_existing_files",
        path=storage.uri(path),
    )


def check_partition_values(storage: Storage, adoption: Adoption, schema: str, partition_by: Sequence[str]) -> None:
    """Each adopted file's partition directories hold values of the partition columns' types in
    ``schema`` (the stream's): a reader casts ``day=notadate`` to a date and fails, so such a file
    is refused before the adoption's claim, named."""
    types = {f["name"]: f["type"] for f in fields_of(schema) if f["name"] in partition_by}
    for adopted in adoption.files:
        for column, text in parse_partition_dir(posixpath.dirname(adopted.path)):
            type_ = types.get(column)
            if text is None or not isinstance(type_, str) or _parses(text, type_):
                continue
            raise _cannot(
                storage,
                adopted.path,
                f"is in partition directory {column}={text}, not a {type_} value, the stream's type of {column!r}: readers would fail casting it",
                f"give the stream's {column!r} the type of the directories' values",
            )


def _parses(text: str, spark_type: str) -> bool:
    """Whether readers read ``text`` (a partition directory's value) as ``spark_type``, in the
    plain form Spark writes it; a type not listed here is not checked."""
    bits = {"byte": 8, "short": 16, "integer": 32, "long": 64}.get(spark_type)
    if bits is not None:
        return re.fullmatch(r"-?[0-9]+", text) is not None and -(2 ** (bits - 1)) <= int(text) < 2 ** (bits - 1)
    if spark_type in ("float", "double") or spark_type.startswith("decimal"):
        return re.fullmatch(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", text) is not None
    if spark_type == "boolean":
        return text.lower() in ("true", "false")
    if spark_type == "date":
        return re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text) is not None and _iso(datetime.date.fromisoformat, text)
    if spark_type in ("timestamp", "timestamp_ntz"):
        shape = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
        return re.fullmatch(shape, text) is not None and _iso(datetime.datetime.fromisoformat, text)
    return True


def _iso(parse: Callable[[str], object], text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def _check_same_schema(storage: Storage, first: tuple[str, str], other: tuple[str, str], partition_by: Sequence[str]) -> None:
    """Every adopted file has the first one's columns, and none of them is a partition column."""
    path, schema = other
    names = [f["name"] for f in fields_of(schema)]
    inside = [c for c in partition_by if c in names]
    if inside:
        raise SchemaMismatchError(
            f"Table {storage.root_uri}: {storage.uri(path)} holds the partition column(s) {inside} as columns too; the "
            "table's files keep partition values in their directory names only. Nothing was written. Rewrite the file "
            "without them, or move it away.",
            table=storage.root_uri,
            key="adopt_existing_files",
            path=storage.uri(path),
            mismatches=[
                {"column": c, "table": "(partition column)", "batch": "(in the file)", "problem": "in the file", "kind": "partitioning"}
                for c in inside
            ],
        )
    if schema == first[1]:
        return
    mine = {f["name"]: f for f in fields_of(first[1])}
    theirs = {f["name"]: f for f in fields_of(schema)}
    differ = sorted(n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n))
    raise SchemaMismatchError(
        f"Table {storage.root_uri}: the existing files do not share one schema - {storage.uri(path)} and "
        f"{storage.uri(first[0])} differ in column(s) {differ} - so they cannot be one table's first batch. Nothing was "
        "written. Rewrite them to one schema, or adopt only the files of one (move the others away).",
        table=storage.root_uri,
        key="adopt_existing_files",
        mismatches=[
            {
                "column": n,
                "table": json.dumps(mine.get(n, {}).get("type")),
                "batch": json.dumps(theirs.get(n, {}).get("type")),
                "problem": "differs",
                "kind": "type",
            }
            for n in differ
        ],
    )


def _differs(column: str, first: dict[str, Any] | None, other: dict[str, Any] | None) -> dict[str, str]:
    """One mismatch of two adopted files' schemas, as ``SchemaMismatchError.mismatches`` holds them."""
    shown = [json.dumps(f["type"]) if f is not None else "-" for f in (first, other)]
    return {"column": column, "table": shown[0], "batch": shown[1], "problem": "the files differ", "kind": "type"}


def check_for_iceberg(storage: Storage, adoption: Adoption, *, table: str) -> None:
    """Before the claim of an Iceberg table's first batch: every adopted file is one its Iceberg
    commit can name (``iceberg.files.staged_rows``: INT96 timestamps, Spark's default, are not)."""
    for f in adoption.files:
        try:
            staged_rows(storage, f.path, table=table)
        except IcebergTableError as exc:
            columns = getattr(exc, "columns", None)
            why = (
                f"stores column(s) {columns} as INT96 timestamps, which Iceberg readers do not read as timestamps"
                if columns
                else "cannot be named by it"
            )
            raise IcebergTableError(
                f"Table {storage.root_uri}: the existing file {storage.uri(f.path)} it adopts {why}, so the Iceberg table "
                f"{table} could not hold it. Nothing was written. Rewrite the file with INT64 timestamps "
                "(spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS), adopt it into a table without format='iceberg', or move it away.",
                table=storage.root_uri,
                path=storage.uri(f.path),
            ) from None
