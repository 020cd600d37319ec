"""Read-only access to a Spark streaming checkpoint directory (never written by this library).

Layout (Spark 4.x)::

    <checkpoint>/metadata                 {"id":"<query uuid>"}       checkpoint.query_metadata
    <checkpoint>/offsets/N                what batch N reads          checkpoint.offset_seq
    <checkpoint>/commits/N                batch N done in the sink    checkpoint.commit_marker
    <checkpoint>/sources/<i>/N[.compact]  files admitted by source i  checkpoint.file_source_log

The sink uses it to learn the query id (its idempotence key), the offsets of the batch it is
committing (copied into the table's offsets log) and the input files of that batch (its
sources log, which is how a recreated checkpoint does not duplicate already-committed files).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import IdentityError
from ..storage.base import Storage
from .commit_marker import CommitMarker, CommitMarkerLog
from .file_source_log import FileSourceEntry, FileSourceLog
from .offset_seq import OffsetSeq, OffsetSeqLog, file_source_log_offset, is_partition_offsets
from .query_metadata import QueryMetadata, parse_query_metadata


@dataclass(frozen=True)
class InputFile:
    """One input file of a batch: which source read it and when Spark first saw it."""

    #: the source's ordinal; a named source (Spark 4.x) its line's position in ``offsets/N``
    source: int
    path: str  # URI-encoded, as in Spark's source log
    timestamp: int


class SparkCheckpoint:
    """A Spark checkpoint location, read through ``storage`` rooted at it."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.offset_log = OffsetSeqLog(storage)
        self.commit_log = CommitMarkerLog(storage)
        self._source_logs: dict[str, FileSourceLog] = {}
        #: within one run of the query (``begin_batch``): the offsets files read (a batch reads its
        #: own and the one before it's, which the batch before read as its own) and the sources
        #: listed; None: no run known, every call reads the checkpoint
        self._run_reads: dict[object, object] | None = None
        self._run: str | None = None

    def begin_batch(self, run: str | None) -> None:
        """A batch of the query starts: what this reader read during ``run`` stays known, as Spark
        writes a batch's offsets file once in a run and a run keeps its sources. Another run
        (``None``: not known to be the same run) may read a checkpoint rewritten meanwhile -
        restored from a copy, batches deleted to run them again - so it reads everything anew;
        within one batch a file is read once all the same."""
        if run is None or run != self._run or self._run_reads is None:
            self._run_reads = {}
        self._run = run

    @property
    def uri(self) -> str:
        return self.storage.root_uri

    def metadata(self) -> QueryMetadata | None:
        try:
            data = self.storage.read_bytes("metadata")
        except FileNotFoundError:
            return None
        return parse_query_metadata(data, path=self.storage.uri("metadata"))

    def query_id(self) -> str:
        meta = self.metadata()
        if meta is None:
            raise IdentityError(
                f"Spark checkpoint {self.uri} has no 'metadata' file yet: the query has not started "
                "(or the location is wrong). Start the query first, or pass query_id= explicitly."
            )
        return meta.id

    def offsets(self, batch_id: int) -> OffsetSeq | None:
        reads = self._run_reads
        if reads is None:
            return self.offset_log.offsets(batch_id)
        held = reads.get(batch_id)
        if isinstance(held, OffsetSeq):
            return held
        found = self.offset_log.offsets(batch_id)
        if found is not None:  # a batch whose file is not there yet may get it later
            for old in [b for b in reads if isinstance(b, int) and b < batch_id - 1]:
                del reads[old]  # the batches before the one before: no batch reads them again
            reads[batch_id] = found
        return found

    def start_offsets(self, batch_id: int) -> dict[str, str] | None:
        """Where batch ``batch_id`` starts, per source key (``OffsetSeq.by_source``): the
        previous batch's end offsets; for batch 0 the initial offsets a partitioned source
        recorded (Kafka's source writes them to ``sources/<key>/0``; a file source's log there
        is not one). A source missing from the map recorded no start; None: the previous
        batch's offsets are gone."""
        if batch_id > 0:
            previous = self.offsets(batch_id - 1)
            if previous is None:
                return None
            return {key: raw for key, raw in previous.by_source().items() if raw is not None}
        current = self.offsets(0)
        if current is None:
            return None
        out: dict[str, str] = {}
        for key in current.by_source():
            raw = initial_offsets(self.storage, f"sources/{key}/0")
            if raw is not None:
                out[key] = raw
        return out

    def latest_batch_id(self) -> int | None:
        return self.offset_log.latest_batch_id(refresh=True)

    def commit(self, batch_id: int) -> CommitMarker | None:
        return self.commit_log.marker(batch_id)

    def source_log(self, source: int | str) -> FileSourceLog:
        key = str(source)
        if key not in self._source_logs:
            self._source_logs[key] = FileSourceLog(self.storage, key)
        return self._source_logs[key]

    def file_sources(self) -> list[str]:
        """Keys of the sources that keep a log under ``sources/<key>/`` (ordinals, or the names of
        Spark 4.x's named sources), ordinals first."""
        reads = self._run_reads
        held = reads.get("sources") if reads is not None else None
        if isinstance(held, list):
            return held
        names = [e.name for e in self.storage.list_dir("sources") if e.is_dir]
        found = sorted(names, key=lambda name: (not name.isdigit(), int(name) if name.isdigit() else 0, name))
        if reads is not None:
            reads["sources"] = found
        return found

    def input_files(self, batch_id: int) -> list[InputFile] | None:
        """Files newly read by batch ``batch_id`` from every file source, or None if unknowable.

        A file source's offset is a position in its own log; the files of this batch are the
        log entries after the previous batch's offset up to this batch's. None means the
        offsets of this batch (or of the one before it) are gone.
        """
        current = self.offsets(batch_id)
        if current is None:
            return None
        previous = self.offsets(batch_id - 1) if batch_id > 0 else None
        if batch_id > 0 and previous is None:
            return None
        before = previous.by_source() if previous is not None else {}
        return self._files_between(before, current)

    def files_read_before(self, batch_id: int) -> list[InputFile] | None:
        """Every file the file sources admitted in batches ``0 .. batch_id - 1`` (what a sink
        that first sees the query at ``batch_id`` takes over), or None if unknowable."""
        if batch_id == 0:
            return []
        last = self.offsets(batch_id - 1)
        return None if last is None else self._files_between({}, last)

    def _files_between(self, before: dict[str, str | None], current: OffsetSeq) -> list[InputFile]:
        files: list[InputFile] = []
        now = current.by_source()
        positions = {key: index for index, key in enumerate(now)}
        for source in self.file_sources():
            upto = file_source_log_offset(now.get(source))
            if upto is None:
                continue  # not a file source (rate, Kafka, ... keep other files under sources/<key>/)
            prev = file_source_log_offset(before.get(source))
            after = -1 if prev is None else prev
            number = int(source) if source.isdigit() else positions[source]
            for entry in self.source_log(source).entries_between(after, upto):
                files.append(InputFile(source=number, path=entry.path, timestamp=entry.timestamp))
        return files


def initial_offsets(storage: Storage, path: str) -> str | None:
    """The JSON line of a partitioned source's initial-offsets file (``v1`` and offsets shaped
    like Kafka's, ``{"topic":{"0":42}}``; Kafka's source writes a zero byte first), or None if
    there is none or it holds something else (a file source's log keeps its first batch's files
    at the same path)."""
    try:
        text = storage.read_bytes(path).lstrip(b"\0").decode("utf-8")
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v") or not is_partition_offsets(lines[1]):
        return None
    return lines[1]


__all__ = ["SparkCheckpoint", "InputFile", "FileSourceEntry", "OffsetSeq", "CommitMarker", "QueryMetadata"]
