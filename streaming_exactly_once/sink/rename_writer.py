"""``rename`` staging: Spark's own writer into the table's hidden staging area.

The batch is written with ``DataFrameWriter`` (any format, ``partitionBy``, writer options) to
``_seo/staging/M-<attempt>/data/``. Nothing under ``_seo`` is visible to any reader - Spark,
Arrow, DuckDB and Hive all skip ``_``-prefixed directories - so a crash mid-write leaves nothing
a naive directory reader could see. The commit then renames each file to the same relative path
under the table root (atomic and O(1) on local disks and HDFS).
"""

from __future__ import annotations

from dataclasses import replace
from importlib.util import find_spec

from pyspark.sql import DataFrame

from ..commit.committer import BatchAttempt, StagedFile
from ..delta.stats import footer_rows
from ..errors import CommitError
from ..storage.base import Storage
from ..storage.io_threads import map_waiting
from ..table.layout import is_hidden


def spark_path(storage: Storage, relative: str) -> str:
    """The path Spark's Hadoop filesystem layer should write to for ``relative``."""
    uri = storage.uri(relative)
    if uri.startswith("file://"):
        return uri[len("file://") :]  # plain local path: no URI-escaping questions for Hadoop
    return uri


def staged_rows(storage: Storage, paths: list[str]) -> list[int]:
    """Rows of each staged Parquet file, from its footer (``delta.stats.footer_rows``; read in
    parallel, as each read waits on the disk)."""

    def rows(path: str) -> int:
        found = footer_rows(storage, path)
        if found is None:
            raise CommitError(
                f"Staged file {storage.uri(path)} of this batch is not a complete Parquet file, although Spark's "
                "writer finished. Nothing was published; the batch fails and Spark runs it again.",
            )
        return found

    return map_waiting(f"footers-{storage.root_uri}", rows, paths)


class RenameWriter:
    def __init__(self, storage: Storage, *, format: str, partition_by: tuple[str, ...], options: dict[str, str]) -> None:
        self.storage = storage
        self.format = format
        self.partition_by = partition_by
        self.options = {"mapreduce.fileoutputcommitter.marksuccessfuljobs": "false", **options}
        #: Parquet on local disk: the rows are counted from the staged files' footers (a few ms
        #: for a batch's files) instead of observing the write, whose per-batch set-up on the
        #: driver costs about as much as the rest of the sink's Python work together
        self.counts_rows = format == "parquet" and storage.scheme == "file" and find_spec("pyarrow") is not None

    def write(self, df: DataFrame, attempt: BatchAttempt) -> list[StagedFile]:
        data_dir = f"{attempt.staging_dir}/data"
        writer = df.write.format(self.format).mode("error").options(**self.options)
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        writer.save(spark_path(self.storage, data_dir))
        prefix = data_dir + "/"
        files = []
        for info in self.storage.walk_files(data_dir):
            relative = info.path[len(prefix) :]
            if is_hidden(relative):  # _SUCCESS, _temporary, .crc side files
                continue
            files.append(StagedFile(final=relative, size=info.size, mtime_ms=info.mtime_ms, staged=info.path))
        if self.counts_rows:
            counted = staged_rows(self.storage, [f.staged or "" for f in files])
            files = [replace(f, rows=n) for f, n in zip(files, counted, strict=True)]
        return sorted(files, key=lambda f: f.final)
