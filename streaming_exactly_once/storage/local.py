"""Local-disk storage built on POSIX calls, because fsspec's local primitives are not exclusive.

fsspec's ``LocalFileSystem.mv`` and ``pipe_file(mode="create")`` check-then-write, so two
writers can both "win". Here:

* ``put_if_absent``: write ``.<name>.<uuid>.tmp`` in the *same* directory, ``fsync`` it,
  then ``renameat2(tmp, name, RENAME_NOREPLACE)`` - the kernel refuses with ``EEXIST`` if
  ``name`` exists, so of any number of racing writers exactly one wins - and ``fsync`` the
  directory so that the new name survives a power cut. Where ``renameat2`` is unavailable,
  ``link(tmp, name)`` + ``unlink(tmp)`` gives the same guarantee; with neither, the storage
  refuses to work (``UnsupportedStorageError``) rather than fall back to check-then-write.
* ``atomic_write``: temp file + ``fsync`` + ``os.replace``.
* ``rename``: ``renameat2(RENAME_NOREPLACE)`` (falls back to ``link`` + ``unlink``).
* ``put_composed_if_absent`` / ``append_range_prepared`` (``ComposedFiles``, ``PreparedFiles``):
  ranges of existing files are copied by the kernel (``copy_file_range``, which shares the
  extents on filesystems that can, such as XFS and Btrfs, and copies page cache to page cache
  on ext4), else by a buffered ``pread``/``pwrite`` loop; then the same fsync + no-replace
  rename as ``put_if_absent``. Why: a ``.compact`` file starts with the previous one.
* ``open_write`` (data files written by the library itself, ``direct`` mode): the file and its
  directory are fsync'd on close; ``sync`` does the same for files another writer produced
  (Spark's, moved into place by the commit). A new directory is made durable in its parent.
  So when a manifest entry is durable, so is every file it names - after a power cut too, not
  only after a process crash. ``durable=False`` (benchmarks of the protocol alone) skips it all.

Temp files start with ``.`` so that Spark, Arrow and our own log listings ignore them
(``base.temp_sibling_name``). A process killed between writing one and renaming it leaves it
behind; the next writer to take the table, and ``seo gc``, remove such leftovers
(``table.temp_files``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import IO, Any

from ..errors import ComposedSourceError
from .base import ByteRange, FileInfo, Piece, Storage, check_relative, join, temp_sibling_name
from .io_threads import map_waiting
from .local_errors import access_error, mapped
from .posix_calls import copy_range, local_path_from_uri, pwrite_all, rename_noreplace


def _fsync_fd(fd: int, *, data_only: bool = False) -> None:
    """Every fsync of a file's bytes goes through here, and every directory's through
    ``_fsync_dir``: the test suite's power-cut model (``testing.power_cut``) wraps the two to
    learn what a power cut would keep, and to fail one the way a disk does."""
    if data_only:
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        _fsync_fd(fd)
    finally:
        os.close(fd)


def _fsync_all(fsync: Callable[[str], None], paths: Sequence[str]) -> None:
    """Each fsync waits on the disk, not the CPU: overlap them, on a pool of their disk's own."""
    if paths:
        map_waiting(f"fsync-{os.stat(paths[0]).st_dev}", fsync, paths)


#: Directories whose name this process has made durable in their parent (or seen made so),
#: with their inode: a directory that exists is not durable for that alone - its creator may
#: have been killed, or its parent's fsync may have failed, before the name reached the disk;
#: and one deleted and made again under the same name is another directory.
_DURABLE_DIRS: dict[str, int] = {}


def _known_durable(path: str) -> bool:
    inode = _DURABLE_DIRS.get(path)
    if inode is None:
        return False
    try:
        if os.stat(path).st_ino == inode:
            return True
    except FileNotFoundError:
        pass
    _DURABLE_DIRS.pop(path, None)
    return False


def makedirs_durable(path: str, *, durable: bool, top: str) -> None:
    """``os.makedirs``, and (``durable``) the name of every directory from ``path`` up to ``top``
    (the storage root) fsync'd into its parent, once per directory and process - whoever made
    it. A directory made here whose parent's fsync fails is removed again, so a retry makes it anew."""
    if durable and _known_durable(path):
        return
    missing = set()
    probe = path
    while probe and not os.path.isdir(probe):
        missing.add(probe)
        probe = os.path.dirname(probe)
    os.makedirs(path, exist_ok=True)
    if not durable:
        return
    chain = []
    probe = path
    while not _known_durable(probe):
        chain.append(probe)
        parent = os.path.dirname(probe)
        if probe == top or parent == probe:
            break
        probe = parent
    for directory in reversed(chain):
        try:
            _fsync_dir(os.path.dirname(directory))
        except OSError:
            for made in sorted((d for d in missing if d.startswith(directory)), reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(made)
            raise
        _DURABLE_DIRS[directory] = os.stat(directory).st_ino


def forget_durable_dirs(path: str) -> None:
    """``path`` and the directories below it were deleted (a new one of the name is not durable)."""
    if _DURABLE_DIRS.pop(path, None) is None:
        return  # a known directory's ancestors are known too (makedirs_durable): nothing below it is
    below = path.rstrip("/") + "/"
    # list() copies the keys in one step: the janitor's thread and the commit's both get here,
    # and iterating the dict itself while the other adds a directory raises RuntimeError
    for directory in [d for d in list(_DURABLE_DIRS) if d.startswith(below)]:
        _DURABLE_DIRS.pop(directory, None)


class _SyncedOnClose(io.FileIO):
    """A new file whose bytes, and whose name in its directory, are fsync'd when it is closed."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "xb")
        self._path = path

    def close(self) -> None:
        if self.closed:
            return
        try:
            _fsync_fd(self.fileno())
        finally:
            super().close()
        _fsync_dir(os.path.dirname(self._path))


class LocalStorage(Storage):
    """Storage on a POSIX filesystem (local disk, NFS with link support, mounted volumes)."""

    rename_is_atomic = True
    writes_temp_siblings = True

    def __init__(self, root: str, *, durable: bool = True) -> None:
        self._root = local_path_from_uri(root)
        self.root_uri = "file://" + self._root
        self._durable = durable

    # -- helpers -----------------------------------------------------------------------------

    def _abs(self, path: str) -> str:
        path = check_relative(path)
        return os.path.join(self._root, path) if path else self._root

    def _tmp_sibling(self, target: str) -> str:
        head, tail = os.path.split(target)
        return os.path.join(head, temp_sibling_name(tail))

    #: ``without_sync``'s twin still makes a directory it creates durable: the sync of a file
    #: later (``sync``) covers its name in its directory, not the directory's in its parent
    _durable_new_dirs = False

    def _write_tmp(self, target: str, data: bytes) -> str:
        makedirs_durable(os.path.dirname(target), durable=self._durable or self._durable_new_dirs, top=self._root)
        tmp = self._tmp_sibling(target)
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            if self._durable:
                _fsync_fd(fh.fileno())
        return tmp

    def _publish_exclusive(self, tmp: str, target: str) -> None:
        """Give ``tmp`` the name ``target`` unless ``target`` exists (then FileExistsError)."""
        try:
            rename_noreplace(tmp, target)  # renameat2(RENAME_NOREPLACE), else link + unlink
        except BaseException:
            # only a failed rename leaves ``tmp`` behind (a successful one took its name: an
            # unlink there would be one more failing system call on every commit's path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        if self._durable:
            _fsync_dir(os.path.dirname(target))

    # -- Storage -----------------------------------------------------------------------------

    def child(self, path: str) -> LocalStorage:
        return LocalStorage(self._abs(path), durable=self._durable)

    def root_is_file(self) -> bool:
        return os.path.exists(self._root) and not os.path.isdir(self._root)

    @mapped("read")
    def read_bytes(self, path: str) -> bytes:
        with open(self._abs(path), "rb") as fh:
            return fh.read()

    @mapped("read")
    def read_head(self, path: str, n: int) -> bytes:
        with open(self._abs(path), "rb") as fh:
            return fh.read(n)

    @mapped("read")
    def read_tail(self, path: str, n: int) -> bytes:
        with open(self._abs(path), "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - n))
            return fh.read()

    @mapped("read")
    def read_tail_synced(self, path: str, n: int) -> bytes:
        with open(self._abs(path), "rb") as fh:
            if self._durable:
                _fsync_fd(fh.fileno())
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - n))
            return fh.read()

    @mapped("read")
    def info(self, path: str) -> FileInfo:
        st = os.stat(self._abs(path))
        return FileInfo(
            check_relative(path),
            st.st_size,
            st.st_mtime_ns // 1_000_000,
            os.path.isdir(self._abs(path)),
            change=f"{st.st_ino}:{st.st_ctime_ns}",
        )

    def exists(self, path: str) -> bool:
        return os.path.exists(self._abs(path))

    def list_dir(self, path: str = "") -> list[FileInfo]:
        base = check_relative(path)
        try:
            it = os.scandir(self._abs(base))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        with it:
            for entry in it:
                try:
                    st = entry.stat()
                except FileNotFoundError:  # vanished between listing and stat
                    continue
                out.append(FileInfo(join(base, entry.name), st.st_size, st.st_mtime_ns // 1_000_000, entry.is_dir()))
        return out

    def walk_files(self, path: str = "") -> Iterator[FileInfo]:
        return self._walk(path, hidden_only=False, recursive=True)

    def hidden_files(self, path: str = "", *, recursive: bool = True) -> Iterator[FileInfo]:
        return self._walk(path, hidden_only=True, recursive=recursive)

    def _walk(self, path: str, *, hidden_only: bool, recursive: bool) -> Iterator[FileInfo]:
        """The files below ``path``; each stat'd only once its name is kept (``hidden_only``)."""
        for dirpath, _dirs, files in os.walk(self._abs(path)):
            for name in files:
                if hidden_only and not name.startswith("."):
                    continue
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                rel = os.path.relpath(full, self._root).replace(os.sep, "/")
                yield FileInfo(rel, st.st_size, st.st_mtime_ns // 1_000_000, False)
            if not recursive:
                return

    @mapped("write")
    def put_if_absent(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        if os.path.exists(target):  # cheap early exit; the link below is the real arbiter
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path))
        tmp = self._write_tmp(target, data)
        try:
            self._publish_exclusive(tmp, target)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path)) from None

    @mapped("write")
    def atomic_write(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        tmp = self._write_tmp(target, data)
        try:
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        if self._durable:
            _fsync_dir(os.path.dirname(target))

    @contextlib.contextmanager
    def open_exclusive(self, path: str) -> Iterator[IO[bytes]]:
        try:
            with self._open_exclusive(path) as fh:
                yield fh
        except OSError as exc:
            error = access_error(self, exc, path, "write")
            if error is None:
                raise
            raise error from exc

    @contextlib.contextmanager
    def _open_exclusive(self, path: str) -> Iterator[IO[bytes]]:
        target = self._abs(path)
        if os.path.exists(target):
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path))
        makedirs_durable(os.path.dirname(target), durable=self._durable or self._durable_new_dirs, top=self._root)
        tmp = self._tmp_sibling(target)
        fh = open(tmp, "xb")
        try:
            yield fh
            fh.flush()
            if self._durable:
                _fsync_fd(fh.fileno())
            fh.close()
            try:
                self._publish_exclusive(tmp, target)
            except FileExistsError:
                raise FileExistsError(errno.EEXIST, "file exists", self.uri(path)) from None
        finally:
            if not fh.closed:
                fh.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    @mapped("write")
    def open_write(self, path: str) -> IO[bytes]:
        target = self._abs(path)
        makedirs_durable(os.path.dirname(target), durable=self._durable, top=self._root)
        if not self._durable:
            return open(target, "xb")
        return io.BufferedWriter(_SyncedOnClose(target), buffer_size=1 << 20)

    def without_sync(self) -> LocalStorage:
        """The same root without any fsync (``Storage.without_sync``): a create is a write and a
        rename, ~0.05 ms, where the durable one waits ~0.5 ms for the disk."""
        if not self._durable:
            return self
        # a subclass stays itself, sharing its state (tests record and hold calls); not
        # ``copy.copy``, which goes through ``__reduce__`` and makes a plain LocalStorage
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._durable = False
        twin._durable_new_dirs = True
        return twin

    def sync(self, paths: Sequence[str], *, contents: bool = True) -> None:
        if not self._durable or not paths:
            return
        targets = [self._abs(p) for p in paths]
        directories = sorted({os.path.dirname(t) for t in targets})
        if contents:
            _fsync_all(_fsync_file, targets)
        _fsync_all(_fsync_dir, directories)

    # -- ComposedFiles and PreparedFiles (storage.base) ----------------------------------------

    supports_composed_files = True

    def _write_pieces(self, fd: int, at: int, pieces: Sequence[Piece]) -> int:
        """Write ``pieces`` to ``fd`` from byte ``at`` (ranges copied by the kernel); the end offset."""
        for piece in pieces:
            if isinstance(piece, ByteRange):
                src = os.open(self._abs(piece.path), os.O_RDONLY)
                try:
                    copy_range(src, fd, piece.offset, piece.length, at)
                except ComposedSourceError as exc:
                    raise ComposedSourceError(f"{self.uri(piece.path)}: {exc}") from None
                finally:
                    os.close(src)
                at += piece.length
            else:
                pwrite_all(fd, piece, at)
                at += len(piece)
        return at

    @mapped("write")
    def put_composed_if_absent(self, path: str, pieces: Sequence[Piece]) -> None:
        target = self._abs(path)
        if os.path.exists(target):  # cheap early exit; the no-replace rename is the real arbiter
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path))
        makedirs_durable(os.path.dirname(target), durable=self._durable, top=self._root)
        tmp = self._tmp_sibling(target)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            try:
                self._write_pieces(fd, 0, pieces)
                if self._durable:
                    _fsync_fd(fd)
            finally:
                os.close(fd)
            self._publish_exclusive(tmp, target)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path)) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    supports_prepared_files = True

    #: Bytes of a prepared copy written back at a time (``append_range_prepared``).
    prepared_flush_bytes = 4 << 20

    @mapped("write")
    def append_range_prepared(self, path: str, source: ByteRange) -> None:
        """Copy ``source`` to the end of work file ``path``, written back ``prepared_flush_bytes``
        at a time (cost flat with history).

        Why in slices: on ext4 (data=ordered) every fsync waits for the journal, and the
        journal waits for the data whose blocks it allocates. A 58 MB copy written back at
        once (its one fsync) held each small fsync of the commits running beside it for ~40 ms
        here (80 ms for the copy); 4 MB at a time holds them for ~15 ms at most, for ~30% more
        time spent copying off the commit path. (A MiB at a time with ``sync_file_range`` was
        tried earlier and lost: it raised the median batch without lowering the p99.)"""
        fd = os.open(self._abs(path), os.O_WRONLY)  # no O_CREAT: a deleted work file stays deleted
        try:
            at = os.fstat(fd).st_size
            step = self.prepared_flush_bytes if self._durable else source.length
            done = 0
            while done < source.length:
                n = min(step, source.length - done)
                self._write_pieces(fd, at + done, [ByteRange(source.path, source.offset + done, n)])
                done += n
                if self._durable:
                    _fsync_fd(fd, data_only=True)
        finally:
            os.close(fd)

    @mapped("write")
    def open_prepared(self, path: str, *, append: bool) -> IO[bytes]:
        target = self._abs(path)
        if append:  # O_APPEND without O_CREAT: a work file someone deleted is never re-created
            return os.fdopen(os.open(target, os.O_WRONLY | os.O_APPEND), "ab")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        return open(target, "wb")

    def sync_prepared(self, path: str) -> None:
        if self._durable:
            _fsync_file(self._abs(path))

    @mapped("write")
    def publish_prepared(self, path: str, final: str) -> None:
        src, dst = self._abs(path), self._abs(final)
        if self._durable:
            _fsync_file(src)
        try:
            rename_noreplace(src, dst)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(final)) from None
        if self._durable:
            _fsync_dir(os.path.dirname(dst))

    @mapped("write")
    def rename(self, src: str, dst: str) -> None:
        s, d = self._abs(src), self._abs(dst)
        try:
            try:
                rename_noreplace(s, d)
            except FileNotFoundError:
                if not os.path.exists(s):
                    raise
                forget_durable_dirs(os.path.dirname(d))  # gone since this process saw it
                makedirs_durable(os.path.dirname(d), durable=self._durable, top=self._root)  # first file of a new partition
                rename_noreplace(s, d)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "rename target exists", self.uri(dst)) from None
        if self._durable:  # the directory may be another process's, made without its name synced
            makedirs_durable(os.path.dirname(d), durable=True, top=self._root)

    @mapped("write")
    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            if not missing_ok:
                raise

    @mapped("write")
    def delete_tree(self, path: str) -> None:
        target = self._abs(path)
        if check_relative(path) == "":
            raise ValueError("refusing to delete a storage root")
        shutil.rmtree(target, ignore_errors=False, onerror=_ignore_missing)
        forget_durable_dirs(target)

    @mapped("write")
    def makedirs(self, path: str) -> None:
        # durable: the files later put there durably name only themselves in this directory
        makedirs_durable(self._abs(path), durable=self._durable or self._durable_new_dirs, top=self._root)

    def filesystem(self) -> tuple[Any, str]:
        from .fsspec_store import make_filesystem

        return make_filesystem("file", {}), self._root

    def options(self) -> dict[str, Any]:
        return {}

    def __reduce__(self) -> tuple[type[LocalStorage], tuple[str], dict[str, Any]]:
        return (LocalStorage, (self._root,), {"_durable": self._durable})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._durable = state["_durable"]


def _ignore_missing(func: Callable[..., Any], path: str, exc_info: tuple[type[BaseException], BaseException, TracebackType | None]) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]
