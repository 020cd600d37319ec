"""The storage contract every backend implements, and the one place that defines it.

Everything above this layer (logs, manifest, WAL, lease, readers) relies on exactly four
promises, each checked by the conformance suite in ``tests/storage/`` on every backend
(which says what it can do - ``rename_is_atomic``, ``usable_on_executors``, optional
capabilities such as ``PreparedFiles`` and ``ComposedFiles`` - and leaves choices such as the sink's staging mode to
the layers above):

1. ``put_if_absent(path, data)`` is **exclusive and all-or-nothing**: of any number of
   concurrent callers on the same path, exactly one succeeds; the others get the built-in
   ``FileExistsError``. Readers never observe a partial file, and a failed call leaves no
   file (and no temporary file) behind.
2. ``atomic_write(path, data)`` replaces the file as one unit: readers see the old or the new
   bytes, never a mix, never an empty file.
3. ``open_exclusive(path)`` is ``put_if_absent`` for data streamed in chunks: the file appears
   under its name on a clean ``with`` exit and never on an exception.
4. ``rename(src, dst)`` never overwrites ``dst`` (``FileExistsError``). It is atomic where
   ``rename_is_atomic`` is true (local disk, HDFS-like); on object stores it is a copy and
   a delete (which is why the sink, ``sink.options.default_staging_mode``, defaults to the
   rename-free ``direct`` mode there).

Paths are relative to the storage root, ``/``-separated, never starting with ``/`` and never
containing ``..``. ``uri(path)`` gives the fully-qualified, *unencoded* URI of a path; the
manifest layer encodes it the way Hadoop does.

Backends: ``local`` (POSIX calls: temp file in the same directory + fsync + ``link`` or
``renameat2(RENAME_NOREPLACE)``), ``s3`` (conditional PUT, ``If-None-Match: *``), ``azure``
(conditional upload, ``If-None-Match: *``), ``gcs`` (conditional multipart upload,
``ifGenerationMatch=0``), ``hadoop`` (the Spark driver's Hadoop API: no-overwrite rename on
HDFS), ``memory`` (in-process, for fast unit tests). Only the storage layer imports fsspec and
the stores' SDKs.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class FileInfo:
    """What a listing knows about one entry, with ``path`` relative to the storage root."""

    path: str
    size: int
    mtime_ms: int
    is_dir: bool
    #: What changes whenever the file's content may have, where the storage knows more than size
    #: and mtime (which ``touch``, ``cp -p`` or a restore can set back): on a local disk the
    #: inode and the status-change time in ns, which no one can set; an object store's ETag.
    #: "" where ``info`` does not know. Not part of equality.
    change: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


#: ``.<name>.<32 hex digits>.tmp``: see ``temp_sibling_name``.
_TEMP_SIBLING = re.compile(r"\.(.+)\.[0-9a-f]{32}\.tmp")


def temp_sibling_name(name: str) -> str:
    """The name of a fresh temp file for ``name`` in the same directory, where a backend with
    ``writes_temp_siblings`` writes the bytes before its no-replace rename to ``name``. Hidden
    (``.``) from readers and from listings of batch files; a process killed in between leaves
    it, and ``table.temp_files`` recognises it by this shape."""
    return f".{name}.{uuid.uuid4().hex}.tmp"


def temp_sibling_target(name: str) -> str | None:
    """``name``'s target if it is a ``temp_sibling_name``, else None."""
    match = _TEMP_SIBLING.fullmatch(name)
    return match.group(1) if match else None


def join(*parts: str) -> str:
    """Join relative storage paths with ``/``, dropping empty parts."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def check_relative(path: str) -> str:
    """Refuse absolute paths and ``..`` so that nothing escapes the storage root."""
    if path.startswith("/") or any(part == ".." for part in path.split("/")):
        raise ValueError(f"storage paths are relative to the root and may not use '..': {path!r}")
    return path.strip("/")


class Storage(ABC):
    """A filesystem rooted at one URI; see the module docstring for the contract."""

    #: Canonical URI of the root, without a trailing slash, e.g. ``file:///data/events``.
    root_uri: str
    #: Whether ``rename`` is a single atomic metadata operation on this backend.
    rename_is_atomic: bool = False
    #: Whether a pickled copy works in a Spark worker's Python process (false for a backend
    #: that drives the driver's JVM: the sink then never ships it to workers).
    usable_on_executors: bool = True
    #: Whether exclusive writes go through a temp sibling (``temp_sibling_name``) that a process
    #: killed mid-write leaves behind (local disk, HDFS; object stores write in one request).
    writes_temp_siblings: bool = False

    # -- identity ----------------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        return self.root_uri.split(":", 1)[0]

    def uri(self, path: str = "") -> str:
        """Fully-qualified, unencoded URI of ``path`` (the root when empty)."""
        path = check_relative(path)
        return self.root_uri if not path else f"{self.root_uri}/{path}"

    @abstractmethod
    def child(self, path: str) -> Storage:
        """A storage rooted at ``path`` below this root, sharing the same backend."""

    # -- reads -------------------------------------------------------------------------------

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """Whole file; ``FileNotFoundError`` if absent."""

    @abstractmethod
    def info(self, path: str) -> FileInfo:
        """Size and modification time; ``FileNotFoundError`` if absent."""

    def read_head(self, path: str, n: int) -> bytes:
        """The first ``n`` bytes (fewer if the file is shorter)."""
        return self.read_bytes(path)[:n]

    def read_tail(self, path: str, n: int) -> bytes:
        """The last ``n`` bytes (the whole file if it is shorter)."""
        return self.read_bytes(path)[-n:]

    def read_tail_synced(self, path: str, n: int) -> bytes:
        """``read_tail`` of a file whose bytes are made durable too (``sync`` of its contents),
        where the storage can in the same open; its name in its directory is left to ``sync``."""
        data = self.read_tail(path, n)
        self.sync([path])
        return data

    def root_is_file(self) -> bool:
        """Whether the root itself is a file (a table path given as a file's): nothing can be
        written below it. False where the storage cannot tell (object stores: a key and a
        prefix may share a name)."""
        return False

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except FileNotFoundError:
            return False
        return True

    @abstractmethod
    def list_dir(self, path: str = "") -> list[FileInfo]:
        """Direct children (files and directories); an empty list if ``path`` does not exist."""

    def walk_files(self, path: str = "") -> Iterator[FileInfo]:
        """Every file below ``path``, recursively, in no particular order."""
        for entry in self.list_dir(path):
            if entry.is_dir:
                yield from self.walk_files(entry.path)
            else:
                yield entry

    def hidden_files(self, path: str = "", *, recursive: bool = True) -> Iterator[FileInfo]:
        """The files below ``path`` (or directly in it) whose names start with ``.``: the temp and
        work files a killed writer leaves. A backend that can list names without their sizes and
        times (local disk) asks only for these files', so the cost of a directory holding a
        file per batch stays a name listing."""
        files = self.walk_files(path) if recursive else (e for e in self.list_dir(path) if not e.is_dir)
        return (e for e in files if e.name.startswith("."))

    # -- writes ------------------------------------------------------------------------------

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` unless it exists (then ``FileExistsError``)."""

    @abstractmethod
    def atomic_write(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` with ``data`` as one unit."""

    def open_exclusive(self, path: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A binary writer whose bytes appear at ``path`` only on a clean exit, if absent. The
        default buffers them and ends with ``put_if_absent`` (a local disk streams instead)."""
        return _buffered_exclusive(self, path)

    @abstractmethod
    def open_write(self, path: str) -> IO[bytes]:
        """A plain streaming write to ``path`` (parents created), failing if it exists.

        Not atomic on local disks (the file is visible while written); an object appears only
        when closed. Used for ``direct``-mode data files, whose visibility the manifest decides.
        """

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` (parents created); never overwrites ``dst``."""

    def sync(self, paths: Sequence[str], *, contents: bool = True) -> None:
        """Make the bytes and the names of these files durable (a no-op where every write
        already is, as on object stores). Called before a manifest entry names them.
        ``contents=False``: only the names (the bytes were synced before, under another name
        of the same file - a rename keeps the file, so only its new directory entry is new)."""
        return  # the default: every write already is durable

    def without_sync(self) -> Storage:
        """This storage with writes that return before they are durable: what they write is
        visible at once, to this process and every other one, but a power cut (not a killed
        process) could lose or tear it until ``sync`` is called on its path. Only for records
        that something durable can rebuild - the bookkeeping records a WAL claim holds, synced
        before the claim is deleted (``commit.committer``). The default is this very storage:
        where every write is durable, nothing is left to defer."""
        return self

    @abstractmethod
    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        """Remove one file."""

    @abstractmethod
    def delete_tree(self, path: str) -> None:
        """Remove a directory and everything below it; nothing if it does not exist."""

    def makedirs(self, path: str) -> None:
        """Create a directory and its parents (a no-op on object stores)."""
        return  # the default: directories are implicit

    def check_exclusive_create(self, probe_dir: str) -> None:
        """Make sure ``put_if_absent`` really is exclusive here, or raise ``UnsupportedStorageError``.

        Promise 1 rests on the service, not on this library: an S3-compatible endpoint that
        ignores ``If-None-Match: *`` lets every create succeed, silently, and with it two writers
        could both claim a batch. A backend whose exclusivity depends on such a remote service
        probes it under ``probe_dir`` (a directory of this storage the caller owns, e.g.
        ``_seo/probe``), leaves nothing behind and remembers the answer for the process. Here
        the default does nothing: local disk and memory get exclusivity from the kernel (or
        the process lock), which the conformance suite proves.
        """
        return

    # -- optional capabilities ---------------------------------------------------------------

    #: Whether this backend also implements ``PreparedFiles`` (see ``prepared_files``): true on
    #: local disks. Not part of the contract every backend implements.
    supports_prepared_files: bool = False
    #: Whether this backend also implements ``ComposedFiles`` (see ``composed_files``): true on
    #: local disks and S3. Not part of the contract every backend implements.
    supports_composed_files: bool = False
    #: Whether this backend also implements ``ComposedUploads`` (see ``composed_uploads``): true
    #: on S3 with server-side copies. Not part of the contract every backend implements.
    supports_composed_uploads: bool = False

    # -- hand-off to readers and Spark executors --------------------------------------------

    @abstractmethod
    def filesystem(self) -> tuple[Any, str]:
        """The fsspec filesystem and the native root path, for Arrow/DuckDB/Polars readers."""

    @abstractmethod
    def options(self) -> dict[str, Any]:
        """The storage options this storage was opened with (secrets included; never log)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root_uri!r})"


@runtime_checkable
class PreparedFiles(Protocol):
    """An optional capability of a storage (background compaction uses it where present): a
    file is built by appends under a hidden work name, then published by an atomic no-replace
    rename. A backend that has it sets ``supports_prepared_files``; the conformance suite
    checks it on every backend that does."""

    def open_prepared(self, path: str, *, append: bool) -> IO[bytes]:
        """A writer for a hidden work file that ``publish_prepared`` will name later.

        ``append=False`` creates (or truncates) the file; ``append=True`` appends to it and
        raises ``FileNotFoundError`` if it is gone - it never re-creates a deleted work file."""
        ...

    def sync_prepared(self, path: str) -> None:
        """Make what was appended so far durable (so that publishing later flushes little)."""
        ...

    def publish_prepared(self, path: str, final: str) -> None:
        """fsync ``path`` and give it the name ``final`` unless that exists (``FileExistsError``)."""
        ...

    def append_range_prepared(self, path: str, source: ByteRange) -> None:
        """Append ``source`` to the work file ``path`` inside the storage (no copy through Python).

        ``FileNotFoundError`` if the work file is gone (never re-created, as ``append=True``);
        ``ComposedSourceError`` if ``source`` is shorter than it says."""
        ...


@dataclass(frozen=True)
class ByteRange:
    """``length`` bytes of the existing file ``path``, from byte ``offset``: a piece of a file
    that the storage copies itself (``ComposedFiles``), so the bytes never pass through Python."""

    path: str
    offset: int
    length: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.length < 0:
            raise ValueError(f"a byte range needs a non-negative offset and length, got {self.offset}, {self.length}")


#: One piece of a composed file: bytes from this process, or a range of an existing file.
Piece = bytes | memoryview | ByteRange


@runtime_checkable
class ComposedFiles(Protocol):
    """An optional capability of a storage: ``put_if_absent`` of a file made of pieces, where a
    ``ByteRange`` of an existing file is copied by the storage itself - in the kernel on a local
    disk (``copy_file_range``), by the server on S3 (``UploadPartCopy``).

    Why: every ``.compact`` file begins with the bytes of the previous one, which at a million
    live files are hundreds of MB; reading them into this process to write them out again is
    most of a compaction's cost. A backend that has it sets ``supports_composed_files``;
    callers keep their streamed path for the others. The promise is exactly promise 1 of the
    contract (exclusive, all or nothing, nothing left behind on failure); a ``ByteRange`` that
    reaches past the end of its file fails the call (``ComposedSourceError``)."""

    def put_composed_if_absent(self, path: str, pieces: Sequence[Piece]) -> None:
        """Create ``path`` with the concatenation of ``pieces`` unless it exists (``FileExistsError``)."""
        ...


def composed_files(storage: Storage) -> ComposedFiles | None:
    """``storage`` as ``ComposedFiles`` if it has that capability, else None."""
    if storage.supports_composed_files and isinstance(storage, ComposedFiles):
        return storage
    return None


@dataclass(frozen=True)
class PendingUpload:
    """A composed file begun by ``ComposedUploads.begin_composed``: ``path`` will hold the bytes
    of ``source`` followed by what ``complete_composed`` adds. Nobody sees it until then."""

    path: str
    source: ByteRange
    #: the backend's own state (S3: the upload id and the copied parts' ETags)
    token: Any


@runtime_checkable
class ComposedUploads(Protocol):
    """An optional capability of a storage that has no prepared files (no appends, no rename)
    but can copy a range server-side into an object that is not visible yet: ``put_composed_if_absent``
    in two halves, so that the copy - nearly all of a ``.compact`` file - is done before the
    compaction batch, and the batch sends only the new lines (S3's ``UploadPartCopy``).

    The promise at ``complete_composed`` is promise 1 of the contract (exclusive, all or
    nothing); until then nothing is visible, and a begun upload that is never completed -
    aborted, or cut short by a killed process - leaves no file."""

    def begin_composed(self, path: str, source: ByteRange) -> PendingUpload | None:
        """Start ``path`` with a server-side copy of ``source``; None where this storage would
        not copy it (too small, an endpoint whose conditional completion is not exclusive).
        ``ComposedSourceError`` if ``source`` changed or is shorter than it says."""
        ...

    def complete_composed(self, upload: PendingUpload, tail: bytes) -> None:
        """Add ``tail`` and create the file unless it exists (``FileExistsError``); aborts the
        upload on any failure."""
        ...

    def abort_composed(self, upload: PendingUpload) -> None:
        """Give up ``upload`` (best effort: a failure leaves an invisible upload behind)."""
        ...


def composed_uploads(storage: Storage) -> ComposedUploads | None:
    """``storage`` as ``ComposedUploads`` if it has that capability, else None."""
    if storage.supports_composed_uploads and isinstance(storage, ComposedUploads):
        return storage
    return None


def prepared_files(storage: Storage) -> PreparedFiles | None:
    """``storage`` as ``PreparedFiles`` if it has that capability, else None."""
    if storage.supports_prepared_files and isinstance(storage, PreparedFiles):
        return storage
    return None


@contextlib.contextmanager
def _buffered_exclusive(storage: Storage, path: str) -> Iterator[IO[bytes]]:
    buffer = io.BytesIO()
    yield buffer
    storage.put_if_absent(path, buffer.getvalue())
