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
from ..commit.table_steps.ledger_step import StagedRead, read_file
from ..errors import CommitError, DataNotDurableError
from ..storage.base import Storage
from ..storage.io_threads import map_waiting
from ..table.layout import is_hidden


def spark_path(storage: Storage, relative: str) -> str:
    """The path Spark's Hadoop filesystem layer should write to for ``relative``."""
    uri = storage.uri(relative)
    if uri.startswith("file://"):
        return uri[len("file://") :]  # plain local path: no URI-escaping questions for Hadoop
    return uri


def read_staged(storage: Storage, files: list[StagedFile]) -> list[StagedFile]:
    """Each staged Parquet file with its rows from its footer, read in the open that syncs its
    bytes, and the checksum its ledger entry needs (``ledger_step.read_file``): one open a file
    where the commit would open it three times. In parallel, as each read waits on the disk.
    A failure fails the batch before its claim (Spark writes it again), a sync's failure as
    ``DataNotDurableError``: its pages may be clean but unwritten, never to be synced again."""

    def read(f: StagedFile) -> StagedFile:
        path = f.staged or ""
        try:
            found: StagedRead = read_file(storage, path, f.size, synced=True)
        except FileNotFoundError:
            raise  # a successor aborted this attempt (the committer tells)
        except OSError as exc:
            raise DataNotDurableError(
                f"Reading and syncing staged file {storage.uri(path)} failed ({str(exc)[:300]}): the disk may not hold its "
                "bytes. Nothing was published; the batch fails before its claim, and Spark writes it again.",
            ) from exc
        if found.footer is None:
            raise CommitError(
                f"Staged file {storage.uri(path)} of this batch is not a complete Parquet file, although Spark's "
                "writer finished. Nothing was published; the batch fails and Spark runs it again.",
            )
        return replace(f, rows=int(found.footer.num_rows), read=found)

    return map_waiting(f"footers-{storage.root_uri}", read, files)


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
            files = read_staged(self.storage, files)
        return sorted(files, key=lambda f: f.final)
