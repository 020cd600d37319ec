"""The POSIX calls ``storage.local`` builds on that Python does not offer as such: an exclusive
rename (``renameat2(RENAME_NOREPLACE)``, else ``link`` + ``unlink``), a range copy in the kernel
(``copy_file_range``, else ``pread``/``pwrite``), and ``file:`` URIs as local paths."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

from ..errors import ComposedSourceError, UnsupportedStorageError

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
            raise UnsupportedStorageError(f"file URI {uri!r} names host {parts.netloc!r}; use file:///absolute/path")
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
        pwrite_all(dst_fd, chunk, dst_offset + done)
        done += len(chunk)
    return use_kernel


def pwrite_all(fd: int, data: bytes | memoryview, at: int) -> None:
    """``pwrite`` until every byte is written (one call may write fewer)."""
    view, written = memoryview(data), 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], at + written)


def same_local_directory(a: str, b: str) -> bool:
    """Whether two local paths or ``file:`` URIs name one existing directory once symbolic
    links are resolved (a table reached through a link and through its real path)."""
    first, second = local_path_from_uri(a), local_path_from_uri(b)
    return os.path.exists(first) and os.path.exists(second) and os.path.realpath(first) == os.path.realpath(second)
