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
import ctypes
import ctypes.util
import errno
import io
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from ..errors import ComposedSourceError, UnsupportedStorageError
from .base import ByteRange, FileInfo, Piece, Storage, check_relative, join, temp_sibling_name
from .io_threads import map_waiting

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _load_renameat2() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()


def rename_noreplace(src: str, dst: str) -> None:
    """Atomically move ``src`` to ``dst``; ``FileExistsError`` if ``dst`` exists."""
    if _renameat2 is not None:
        rc = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), dst)
    # Fallback: link is exclusive too; the unlink afterwards is harmless if we crash before it
    # (the caller's verify() sees dst present and cleanup removes src).
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EMLINK, errno.EXDEV):
            raise UnsupportedStorageError(
                f"{os.path.dirname(dst)} supports neither renameat2(RENAME_NOREPLACE) nor hard links, so "
                "an exclusive create cannot be guaranteed there. Use a local disk, HDFS or S3."
            ) from exc
        raise
    os.unlink(src)


def local_path_from_uri(uri: str) -> str:
    """``/abs``, ``rel``, ``file:/abs``, ``file:///abs`` or ``file://localhost/abs`` -> ``/abs``.

    ``file:`` URIs are percent-decoded as URIs must be; plain paths are taken literally.
    """
    if uri.startswith("file:"):
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise UnsupportedStorageError(
                f"file URI {uri!r} names host {parts.netloc!r}; use file:///absolute/path"
            )
        path = unquote(parts.path)  # URIs are percent-encoded (Spark passes file:/a%20b)
    else:
        path = uri
    return os.path.normpath(os.path.abspath(path))


#: ``copy_file_range`` failures that mean "not here" (another filesystem, an old kernel, a
#: filesystem or file kind without it): the range is copied through a buffer instead.
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})
_KERNEL_CHUNK = 1 << 30  # bytes asked of one copy_file_range call (it may copy fewer)
_BUFFER_CHUNK = 1 << 20  # bytes per pread/pwrite of the buffered copy


def copy_range(src_fd: int, dst_fd: int, offset: int, length: int, dst_offset: int, *, kernel: bool = True) -> bool:
    """Copy ``length`` bytes of ``src_fd`` from ``offset`` to ``dst_fd`` at ``dst_offset``.

    In the kernel where it can (``copy_file_range``; the bytes never enter this process, and
    the GIL is released for the whole call), else through a buffer: a filesystem or kernel
    without it answers EXDEV/ENOSYS/EOPNOTSUPP/EINVAL and the copy goes on from where it
    stopped. Explicit offsets on both sides, so neither file position matters (and ``dst_fd``
    must not be ``O_APPEND``, which ``copy_file_range`` refuses). Returns whether the kernel
    copied it all. A source shorter than ``offset + length`` raises ``ComposedSourceError``:
    a half-copied range must never look like a complete file.
    """
    done = 0
    use_kernel = kernel and hasattr(os, "copy_file_range")
    while done < length and use_kernel:
        try:
            n = os.copy_file_range(src_fd, dst_fd, min(length - done, _KERNEL_CHUNK), offset + done, dst_offset + done)
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
            use_kernel = False
            break
        if n == 0:
            raise ComposedSourceError(f"source ended after {offset + done} bytes, {length - done} short of the range to copy")
        done += n
    while done < length:
        chunk = os.pread(src_fd, min(length - done, _BUFFER_CHUNK), offset + done)
        if not chunk:
            raise ComposedSourceError(f"source ended after {offset + done} bytes, {length - done} short of the range to copy")
        _pwrite_all(dst_fd, chunk, dst_offset + done)
        done += len(chunk)
    return use_kernel


def _pwrite_all(fd: int, data: bytes | memoryview, at: int) -> None:
    view, written = memoryview(data), 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], at + written)


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


def makedirs_durable(path: str, *, durable: bool) -> None:
    """``os.makedirs``, and (``durable``) each new directory's name fsync'd into its parent."""
    if os.path.isdir(path):
        return
    missing = []
    probe = path
    while probe and not os.path.isdir(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    os.makedirs(path, exist_ok=True)
    if durable:
        for created in reversed(missing):
            _fsync_dir(os.path.dirname(created))


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
        makedirs_durable(os.path.dirname(target), durable=self._durable or self._durable_new_dirs)
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

    def read_bytes(self, path: str) -> bytes:
        with open(self._abs(path), "rb") as fh:
            return fh.read()

    def read_head(self, path: str, n: int) -> bytes:
        with open(self._abs(path), "rb") as fh:
            return fh.read(n)

    def read_tail(self, path: str, n: int) -> bytes:
        with open(self._abs(path), "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - n))
            return fh.read()

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
        base = self._abs(path)
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                rel = os.path.relpath(full, self._root).replace(os.sep, "/")
                yield FileInfo(rel, st.st_size, st.st_mtime_ns // 1_000_000, False)

    def put_if_absent(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        if os.path.exists(target):  # cheap early exit; the link below is the real arbiter
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path))
        tmp = self._write_tmp(target, data)
        try:
            self._publish_exclusive(tmp, target)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path)) from None

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
        target = self._abs(path)
        if os.path.exists(target):
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path))
        os.makedirs(os.path.dirname(target), exist_ok=True)
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

    def open_write(self, path: str) -> IO[bytes]:
        target = self._abs(path)
        makedirs_durable(os.path.dirname(target), durable=self._durable)
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
                _pwrite_all(fd, piece, at)
                at += len(piece)
        return at

    def put_composed_if_absent(self, path: str, pieces: Sequence[Piece]) -> None:
        target = self._abs(path)
        if os.path.exists(target):  # cheap early exit; the no-replace rename is the real arbiter
            raise FileExistsError(errno.EEXIST, "file exists", self.uri(path))
        makedirs_durable(os.path.dirname(target), durable=self._durable)
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

    def open_prepared(self, path: str, *, append: bool) -> IO[bytes]:
        target = self._abs(path)
        if append:  # O_APPEND without O_CREAT: a work file someone deleted is never re-created
            return os.fdopen(os.open(target, os.O_WRONLY | os.O_APPEND), "ab")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        return open(target, "wb")

    def sync_prepared(self, path: str) -> None:
        if self._durable:
            _fsync_file(self._abs(path))

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

    def rename(self, src: str, dst: str) -> None:
        s, d = self._abs(src), self._abs(dst)
        try:
            try:
                rename_noreplace(s, d)
            except FileNotFoundError:
                if not os.path.exists(s):
                    raise
                makedirs_durable(os.path.dirname(d), durable=self._durable)  # first file of a new partition
                rename_noreplace(s, d)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "rename target exists", self.uri(dst)) from None

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def delete_tree(self, path: str) -> None:
        target = self._abs(path)
        if check_relative(path) == "":
            raise ValueError("refusing to delete a storage root")
        shutil.rmtree(target, ignore_errors=False, onerror=_ignore_missing)

    def makedirs(self, path: str) -> None:
        os.makedirs(self._abs(path), exist_ok=True)

    def filesystem(self) -> tuple[Any, str]:
        from .fsspec_store import make_filesystem

        return make_filesystem("file", {}), self._root

    def options(self) -> dict[str, Any]:
        return {}

    def __reduce__(self) -> tuple[type[LocalStorage], tuple[str], dict[str, Any]]:
        return (LocalStorage, (self._root,), {"_durable": self._durable})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._durable = state["_durable"]


def _ignore_missing(
    func: Callable[..., Any], path: str, exc_info: tuple[type[BaseException], BaseException, TracebackType | None]
) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]
