"""The library's exception tree: every error it raises on purpose derives from `ExactlyOnceError`.

Why one root: a streaming job wraps the sink in retry/alerting code, and that code needs one
`except ExactlyOnceError` to tell "the library refused to do something unsafe" apart from a
Spark or network failure. Each message says what happened, where (file, batch) and what to do;
the same facts are kept as attributes so that code does not have to parse messages.

Storage primitives follow Python's conventions instead: a create-if-absent write that loses
raises the built-in `FileExistsError`, a missing file `FileNotFoundError` (see
`streaming_exactly_once.storage.base`).

Retryability is marked with two mixins: `TransientError` (trying again later may succeed,
e.g. a lease still held by a live writer) and `TerminalError` (a human must act first,
e.g. a corrupt log file).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class TransientError(Exception):
    """Mixin: the same operation may succeed if tried again later."""


class TerminalError(Exception):
    """Mixin: retrying cannot help; a person must act (the message says how)."""


class ExactlyOnceError(Exception):
    """Root of every error the library raises on purpose."""

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        self.message = message
        for key, value in attrs.items():
            setattr(self, key, value)
        self._attrs = attrs

    def __reduce__(self) -> tuple[Callable[..., ExactlyOnceError], tuple[type[ExactlyOnceError], str, dict[str, Any]]]:
        # keep errors picklable across Spark/py4j/process boundaries
        return (_rebuild, (type(self), self.message, self._attrs))


def _rebuild(cls: type[ExactlyOnceError], message: str, attrs: dict[str, Any]) -> ExactlyOnceError:
    err = cls.__new__(cls)
    ExactlyOnceError.__init__(err, message, **attrs)
    return err


# --- configuration -------------------------------------------------------------------------


class ConfigError(ExactlyOnceError, TerminalError, ValueError):
    """An option or config file value is missing, unknown or out of range."""


class ExistingFilesError(ConfigError):
    """The directory a new table is to be written to already holds data files (a batch job's
    output, files pandas wrote): the table's manifest would hide them from every reader, so the
    sink refuses it before writing anything - unless asked to adopt them (``adopt_existing_files``).
    ``table``, ``files`` (how many), ``example`` (one file's URI)."""


class MissingDependencyError(ConfigError, ImportError):
    """An optional dependency (an extra) is needed for this call and is not installed: a
    configuration problem of the environment, raised before anything is written. Which extra
    provides what is declared once, in ``streaming_exactly_once.extras``."""

    package: str
    extra: str
    feature: str

    def __init__(self, *, package: str, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs the Python package '{package}', which is not installed. Install it with: pip install 'streaming-exactly-once[{extra}]'",
            package=package,
            extra=extra,
            feature=feature,
        )


class WorkerPythonError(ConfigError):
    """Spark's Python workers (``PYSPARK_PYTHON``) cannot import the library or what it needs there."""


# --- storage -------------------------------------------------------------------------------


class StorageError(ExactlyOnceError, OSError):
    """A storage backend failed in a way that has no built-in OSError equivalent."""


class UnsupportedStorageError(StorageError, TerminalError):
    """The URI scheme or filesystem cannot give the guarantees the library needs."""


class StorageAccessError(StorageError, TerminalError):
    """The store refused a table's URI: credentials rejected or missing, its container/bucket
    missing, a read-only file system, permission denied, or a path that is a file where a
    directory must be.

    Raised instead of the SDK's or the OS's own exception (often after a chain of retries and
    wrappers) so that the one line a user sees names the table, the cause and what to fix.
    ``reason`` is ``credentials``, ``container``, ``read-only``, ``permission`` or
    ``not-a-directory``; ``uri`` the path that was being read or written; ``table`` the table's
    root, when the storage knows it (then the message starts with it: "Cannot write to table X").
    """

    def __init__(self, *, uri: str, reason: str, detail: str, hint: str, table: str | None = None, action: str = "access") -> None:
        if table is None:
            message = f"Cannot {action} {uri}: {detail}. {hint}"
        else:
            where = "" if uri == table or uri in detail else f" ({uri})"
            message = f"Cannot {action} table {table}: {detail}{where}. {hint}"
        super().__init__(message, uri=uri, reason=reason, detail=detail, hint=hint, table=table, action=action)


class ComposedSourceError(StorageError, TerminalError):
    """A file composed from ranges of other files (``storage.base.ComposedFiles``) could not be
    built because a source file is shorter than the range to copy, or (S3) is no longer the
    object it was when the copy began: it changed or was cut short under the copy. The message
    names the source. Nothing was created; the caller does not retry with the same ranges."""


# --- logs ----------------------------------------------------------------------------------


class LogError(ExactlyOnceError):
    """A metadata log (manifest, offsets, commits, sources, WAL, lease) is unusable."""


class LogCorruptError(LogError, TerminalError):
    """A log file exists but cannot be parsed: empty, truncated, garbage, wrong header."""

    def __init__(self, *, path: str, batch_id: int | None, problem: str, hint: str) -> None:
        where = f"{path}" if batch_id is None else f"{path} (batch {batch_id})"
        super().__init__(
            f"Corrupt log file {where}: {problem}. {hint}",
            path=path,
            batch_id=batch_id,
            problem=problem,
            hint=hint,
        )


class UnsupportedLogVersionError(LogError, TerminalError):
    """A log file was written in a newer format version than this library reads."""

    def __init__(self, *, path: str, batch_id: int | None, found: int, max_supported: int) -> None:
        super().__init__(
            f"Log file {path}"
            + ("" if batch_id is None else f" (batch {batch_id})")
            + f" has format v{found}, but this version of streaming-exactly-once reads at most "
            f"v{max_supported}. It was written by a newer release: upgrade streaming-exactly-once "
            "(and Spark, for _spark_metadata/checkpoint files) before reading or writing this table.",
            path=path,
            batch_id=batch_id,
            found=found,
            max_supported=max_supported,
        )


class MissingBatchError(LogError, TerminalError):
    """A batch file that the log's own structure says must exist is missing."""

    def __init__(self, *, directory: str, missing: list[int], context: str, hint: str) -> None:
        shown = ", ".join(str(b) for b in missing[:10]) + (" ..." if len(missing) > 10 else "")
        super().__init__(
            f"Log {directory} is missing batch file(s) {shown} ({context}). {hint}",
            directory=directory,
            missing=list(missing),
            context=context,
            hint=hint,
        )


class LogConflictError(LogError, TerminalError):
    """A batch file already exists with different content: someone else wrote this batch."""

    def __init__(self, *, path: str, batch_id: int, hint: str) -> None:
        super().__init__(
            f"Log file {path} (batch {batch_id}) already exists with different content: another writer has written this batch. {hint}",
            path=path,
            batch_id=batch_id,
            hint=hint,
        )


# --- writers and commits -------------------------------------------------------------------


class ConcurrentWriterError(ExactlyOnceError, TransientError):
    """Another live writer holds the table's lease."""


class SinkInUseError(ExactlyOnceError, TerminalError, ValueError):
    """One sink object was asked to serve two running queries at once."""


class WriterFencedError(ExactlyOnceError, TerminalError):
    """This writer's lease was taken over by a newer writer; it must stop and never publish."""


class CommitError(ExactlyOnceError):
    """A commit step kept failing after its bounded retries; the batch stays pending in the WAL."""


class DataNotDurableError(CommitError):
    """The disk failed to make a batch's data durable (a failed fsync). Linux marks the pages of
    a failed fsync clean, so a second fsync of the same file proves nothing: the batch is never
    published from those files. Before its manifest entry it is withdrawn and Spark re-runs it."""


class IdentityError(ExactlyOnceError, TerminalError):
    """The streaming query or table identity cannot be determined or does not match."""


class DuplicateInputError(ExactlyOnceError, TerminalError):
    """A batch re-reads input already committed and its rows cannot be attributed to input files."""


class CheckpointRewoundError(ExactlyOnceError, TerminalError):
    """A checkpoint put back to an earlier state re-plans a batch the table holds with other input."""


class SourceOffsetError(ExactlyOnceError, TerminalError):
    """A batch of a partitioned source (Kafka) would duplicate or skip records the table holds."""


class OffsetGapError(SourceOffsetError):
    """A batch starts after the records the table holds: the ones in between were never written."""


class OffsetColumnsMissingError(SourceOffsetError):
    """A batch re-reads records the table holds and has no columns to drop them by."""


class OffsetResetError(SourceOffsetError):
    """A batch reads offsets the table holds records at, and the records it has there agree with
    the table's in some columns and not in others: the sink cannot tell a topic deleted and
    recreated (new records at old offsets) from a re-read of the same records."""


class SchemaMismatchError(ConfigError):
    """A batch (or a stream, at ``start``) does not fit its table's schema: a type change readers
    cannot read, a missing non-nullable column, other partition columns, or a new column or a
    wider type without the ``schema_evolution`` that allows it. Raised before anything of the
    batch is written. ``mismatches`` holds one dict per problem (``column``, ``table``,
    ``batch``, ``problem``, ``kind``); the message shows them side by side and says what to do."""


# --- Delta target ------------------------------------------------------------------------


class DeltaTableError(ExactlyOnceError, TerminalError):
    """The Delta table of a ``format="delta"`` target cannot be used as asked: its ``_delta_log``
    does not load, it uses features our other readers cannot honour, or a Delta commit failed."""


class DeltaSchemaMismatchError(DeltaTableError, SchemaMismatchError):
    """A batch's columns do not fit the schema (or partitioning) of an existing Delta table."""


# --- Iceberg target ----------------------------------------------------------------------


class IcebergTableError(ExactlyOnceError, TerminalError):
    """The Iceberg table of a ``format="iceberg"`` target cannot be used as asked: its metadata
    does not load, it uses features an append of our files would break, or a commit failed."""


class IcebergLocationOutsideRootError(IcebergTableError, FileNotFoundError):
    """The Iceberg metadata names a file outside the table's root: Iceberg records absolute
    locations, so a table copied or moved without rewriting them still points at its old place.
    A ``FileNotFoundError`` too, as pyiceberg expects of a file it cannot open."""


class CatalogNotConfiguredError(IcebergTableError, ConfigError):
    """The table's Iceberg side lives in a pyiceberg catalog this environment has no
    configuration of (no properties given, no ``PYICEBERG_CATALOG__<NAME>__*`` variables, no
    ``~/.pyiceberg.yaml`` entry): the environment lacks something, like a missing extra - the
    table is not broken. Raised before anything is read or changed; ``seo`` exits 4."""

    catalog: str


class IcebergSchemaMismatchError(IcebergTableError, SchemaMismatchError):
    """A batch's columns do not fit the schema (or partition spec) of an existing Iceberg table
    (a ``SchemaMismatchError`` like a Delta table's)."""


# --- readers -------------------------------------------------------------------------------


class ReaderError(ExactlyOnceError):
    """A manifest-aware read cannot return exactly the committed data."""


class TableNotFoundError(ReaderError, TerminalError, FileNotFoundError):
    """The path holds no table written by this library or by Spark's file sink."""


class DataFileMissingError(ReaderError, TerminalError):
    """A data file listed as committed in the manifest does not exist in storage."""


class ManifestEntryOutsideRootError(ReaderError, TerminalError):
    """A manifest entry points outside the table root and outside reads were not allowed."""


class SymlinkOutsideRootError(ManifestEntryOutsideRootError):
    """A committed data file (or its directory) is a symbolic link to a place outside the table root."""


class UnsafeReadError(ReaderError, TerminalError):
    """The read as asked would bypass the manifest (globs, several paths) and see uncommitted files."""


class InvalidAsOfError(ReaderError, ConfigError):
    """``as_of`` is not a batch id of the table (negative, not an integer, after the latest batch)."""


# --- maintenance ---------------------------------------------------------------------------


class GcRefusedError(ExactlyOnceError, TerminalError):
    """``seo gc`` found the table in a state where it cannot tell garbage from committed data;
    it deleted nothing."""


class BatchRejectedError(ExactlyOnceError, TerminalError):
    """A mandatory quality check failed under the ``full`` commit policy: nothing was published."""


class AuditViolationError(ExactlyOnceError, TerminalError):
    """``audit="enforce"``: the batch breaks an invariant of its own ledger (rows not conserved,
    a file named twice, offsets overlapping the table's or leaving an unrecorded gap, a
    compaction that loses rows). Raised before the WAL claim: nothing of the batch is published.
    ``violations`` holds one dict per problem (``check``, ``batchId``, ``message``, ...)."""
