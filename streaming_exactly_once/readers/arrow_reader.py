"""Committed data as a ``pyarrow.dataset.Dataset`` (the base of the pandas, Polars and DuckDB readers).

The dataset is built from the explicit list of committed files - never from a directory listing
- with Hive partitioning decoded the way Spark encodes it (``%XX`` escapes, ``__HIVE_DEFAULT_
PARTITION__`` for null) and column types pinned from the recorded Spark schema. Files are read
through the table's fsspec filesystem (``pyarrow.fs.FSSpecHandler``), so S3 and any other
backend stream their bytes; nothing is downloaded first.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import extras
from ..errors import ConfigError, DataFileMissingError
from ..manifest.paths import normalize_uri
from ..storage.base import Storage
from .arrow_schema import table_schema
from .committed_files import CommittedFiles
from .visibility import committed_files

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads


def _pyarrow() -> tuple[Any, Any, Any]:  # the pyarrow, pyarrow.dataset and pyarrow.fs modules
    extras.require("arrow")
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    return pa, ds, pafs


#: The data file formats pyarrow reads (and so ``read.arrow``, ``pandas``, ``polars`` and ``duckdb``).
ARROW_FORMATS = ("parquet", "orc", "csv", "json")
#: text formats whose files Spark leaves empty (0 bytes) for a batch without rows - its own file
#: sink publishes them, vanilla Spark reads them as no rows, Arrow's readers refuse them
#: ("Empty JSON stream"): left out of the dataset
EMPTY_FILE_FORMATS = ("csv", "json")


def check_format(fmt: str | None) -> str | None:
    """``format=`` as the Arrow readers take it: any case; a name they cannot read is a
    ``ConfigError`` listing the choices (and the closest one), before anything is read."""
    if fmt is None:
        return None
    name = fmt.lower() if isinstance(fmt, str) else fmt
    if name not in ARROW_FORMATS:
        close = difflib.get_close_matches(str(name), ARROW_FORMATS, n=1)
        raise ConfigError(
            f"format {fmt!r} is not one the readers read: the choices are {', '.join(ARROW_FORMATS)}"
            + (f". Did you mean {close[0]!r}?" if close else " (or leave format out: the table records its own)."),
            key="format",
        )
    return name


def _file_format(fmt: str, full_schema: Any, partition_columns: tuple[str, ...], options: Mapping[str, str]) -> Any:
    pa, ds, _ = _pyarrow()
    fmt = check_format(fmt) or fmt
    if fmt == "parquet":
        if full_schema is None:  # each file's own types: INT96 as Arrow's nanoseconds, like INT64 nanoseconds
            return ds.ParquetFileFormat()
        # The table's schema has Spark's microseconds: INT96 read as microseconds too, or dates
        # after 2262 (a 9999-12-31 "valid to") wrap around before the cast
        return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
    if fmt == "orc":
        return ds.OrcFileFormat()
    data_fields = [f for f in full_schema if f.name not in partition_columns] if full_schema is not None else None
    if fmt == "csv":
        import pyarrow.csv as pacsv

        header = str(options.get("header", "false")).lower() == "true"
        names = [f.name for f in data_fields] if data_fields else None
        return ds.CsvFileFormat(
            parse_options=pacsv.ParseOptions(delimiter=options.get("sep", options.get("delimiter", ","))),
            read_options=pacsv.ReadOptions(
                column_names=names, skip_rows=1 if header and names else 0, autogenerate_column_names=names is None and not header
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={f.name: f.type for f in data_fields} if data_fields else None, strings_can_be_null=True
            ),
        )
    if fmt == "json":
        import pyarrow.json as pj

        schema = pa.schema(data_fields) if data_fields else None
        return ds.JsonFileFormat(parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    raise AssertionError(fmt)  # check_format refused every other name


def arrow_filesystem(storage: Storage) -> tuple[Any, str]:  # a pyarrow FileSystem and its root
    _, _, pafs = _pyarrow()
    fs, root = storage.filesystem()
    if storage.scheme == "file":
        return pafs.LocalFileSystem(), root
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), root


def dataset(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
) -> pads.Dataset:
    """A ``pyarrow.dataset.Dataset`` of exactly the committed files (see module docstring)."""
    pa, ds, _ = _pyarrow()
    format = check_format(format)  # a misspelt format fails before the table is read
    files = committed_files(path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, verify=True)
    return dataset_of(files, format=format, options=options)


def dataset_of(files: CommittedFiles, *, format: str | None = None, options: Mapping[str, str] | None = None) -> Any:
    pa, ds, _ = _pyarrow()
    fmt = files.file_format(format)
    if format is None and fmt.lower() not in ARROW_FORMATS:
        raise ConfigError(
            f"Table {files.storage.root_uri} holds {fmt!r} files, which the Arrow readers cannot read (they read "
            f"{', '.join(ARROW_FORMATS)}): read it with read.spark.",
            key="format",
            table=files.storage.root_uri,
        )
    reader_options = files.reader_options(options)
    full_schema, partition_schema = table_schema(files.schema_json, files.partition_columns)
    filesystem, native_root = arrow_filesystem(files.storage)
    paths = files.prefixed(native_root + "/")
    if fmt.lower() in EMPTY_FILE_FORMATS:  # a 0-byte file holds no rows, and Arrow refuses it
        paths = [p for p, size in zip(paths, files.sizes, strict=True) if size]
    for uri in files.outside:  # allow_outside_root=True: same filesystem, absolute location
        paths.append(uri.split("://", 1)[1] if files.storage.scheme != "file" else normalize_uri(uri)[len("file://") :])
    partitioning = ds.HivePartitioning(partition_schema, segment_encoding="uri") if len(partition_schema) else None
    file_format = _file_format(fmt, full_schema, files.partition_columns, reader_options)
    try:
        return ds.dataset(
            paths,
            schema=full_schema,
            format=file_format,
            filesystem=filesystem,
            partitioning=partitioning,
            partition_base_dir=native_root,
        )
    except FileNotFoundError as exc:
        raise DataFileMissingError(f"Committed data file vanished while opening the table: {exc}") from exc


def arrow(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
    columns: list[str] | None = None,
    filter: Any = None,
) -> pa.Table:
    """The committed rows as one ``pyarrow.Table`` (``columns`` and ``filter`` as in
    ``pyarrow.dataset.Dataset.to_table``; the other arguments as in ``dataset``)."""
    data = dataset(
        path,
        as_of=as_of,
        storage_options=storage_options,
        allow_outside_root=allow_outside_root,
        format=format,
        options=options,
    )
    try:
        return data.to_table(columns=columns, filter=filter)
    except FileNotFoundError as exc:
        raise DataFileMissingError(f"Committed data file vanished while reading: {exc}") from exc
