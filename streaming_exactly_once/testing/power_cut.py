"""A local disk that can lose power: what a directory tree holds durably, an fsync that fails the
way Linux's does, and a power cut that brings the tree back to exactly its durable state.

What counts as durable (strict POSIX; a journaling filesystem often keeps more):

* a file's bytes, as of its last successful fsync (``fdatasync`` too);
* a name in a directory - a create, a rename, an unlink, of a file or of a directory - as of
  the last successful fsync of that directory.

``fail_fsync`` makes the n-th fsync of a matching path fail with EIO. Then, as Linux does after
a failed writeback, the pages it could not write are marked clean: a later fsync of the same
inode succeeds, but those bytes never reach the disk (after the power cut they read as NULs).
A failed fsync of a directory makes nothing durable; a later successful one does.

``power_cut()`` rewrites the tree: a file whose bytes were never synced comes back empty (or
NUL-filled, ``lost="nul"``), a name never synced into its directory vanishes, a name unlinked
since its directory's last fsync reappears (a renamed file may then be under both names, as
hard links). ``image()`` freezes the durable state at an instant (a fault rule's callback at a
commit boundary) for a later ``power_cut(image)``: the cut "happened" at that instant.

How it learns: ``storage.local`` sends every fsync through ``_fsync_fd`` and ``_fsync_dir``;
``PowerCutDisk`` (a context manager) wraps both for the paths under its root, in every thread
of this process. Files are told apart by inode and birth time (``statx``), so a reused inode
number is a new file. What a native library writes itself - delta-rs's ``_delta_log`` files, a
pyiceberg catalog's metadata file - is seen like any file: the model learns of it at the next
sync of its directory, and its bytes only from a sync of the file, which the sink must make
(it never syncs on its own), so such a write is lost at the cut unless the sink synced it.
Paths matching ``keep`` (default none) are kept as they were at the instant of the image
instead. ``real_fsync=False`` (the default) records without waiting for the real disk.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import shutil
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

from ..storage import local

Kind = Literal["file", "dir"]
#: (device, inode, birth time in ns): a file, even after its inode number is reused
FileId = tuple[int, int, int]


@dataclass(frozen=True)
class Entry:
    """A name in a directory: a file (its identity and size when listed) or a directory."""

    fid: FileId | None
    size: int = 0

    @property
    def is_dir(self) -> bool:
        return self.fid is None


@dataclass(frozen=True)
class FsyncEvent:
    kind: Kind
    path: str  # relative to the root (a temp file's own name while it has one)
    ok: bool


@dataclass
class DurableImage:
    """The durable state at one instant: directory listings, file bytes, kept paths."""

    dirs: dict[str, dict[str, Entry]]
    content: dict[FileId, bytes]
    poisoned: dict[FileId, int]
    kept: dict[str, bytes]


@dataclass
class PowerCutReport:
    """What the power cut changed, relative to the root."""

    vanished: list[str] = field(default_factory=list)
    reappeared: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"vanished {self.vanished}, reappeared {self.reappeared}, changed bytes {self.changed}"


@dataclass
class _Rule:
    pattern: re.Pattern[str]
    kind: Kind | Literal["any"]
    nth: int
    count: int = 0


class PowerCutDisk:
    """The durable state of the tree under ``root`` (see the module docstring)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        lost: Literal["empty", "nul"] = "empty",
        keep: Iterable[str] = (),
        real_fsync: bool = False,
    ) -> None:
        self.root = os.path.realpath(os.fspath(root))
        os.makedirs(self.root, exist_ok=True)
        self.lost = lost
        self.keep = [re.compile(k) for k in keep]
        self.real_fsync = real_fsync
        self.events: list[FsyncEvent] = []
        self._lock = threading.RLock()
        self._rules: list[_Rule] = []
        self._dirs: dict[str, dict[str, Entry]] = {}
        self._content: dict[FileId, bytes] = {}
        self._poisoned: dict[FileId, int] = {}
        self._baseline()

    # -- installing ----------------------------------------------------------------------------

    def __enter__(self) -> PowerCutDisk:
        _install(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        _uninstall(self)

    def contains(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + os.sep)

    # -- failures ------------------------------------------------------------------------------

    def fail_fsync(self, pattern: str, *, nth: int = 1, kind: Kind | Literal["any"] = "file") -> None:
        """The ``nth`` fsync (from now) of a path matching ``pattern`` (a regex searched in the
        path relative to the root) fails with EIO."""
        with self._lock:
            self._rules.append(_Rule(re.compile(pattern), kind, nth))

    @property
    def failed(self) -> list[FsyncEvent]:
        with self._lock:
            return [e for e in self.events if not e.ok]

    def _fails(self, kind: Kind, rel: str) -> bool:
        hit = False
        for rule in self._rules:
            if rule.kind in (kind, "any") and rule.pattern.search(rel):
                rule.count += 1
                hit = hit or rule.count == rule.nth
        if hit:
            self.events.append(FsyncEvent(kind, rel, False))
        return hit

    # -- the hooks -----------------------------------------------------------------------------

    def fsync_file(self, fd: int, path: str, data_only: bool, real: Callable[..., None]) -> None:
        rel = self._rel(path)
        fid = _file_id_of_fd(fd)
        with self._lock:
            if self._fails("file", rel):
                self._poisoned[fid] = max(self._poisoned.get(fid, 0), os.fstat(fd).st_size)
                raise OSError(errno.EIO, "injected EIO: the pages are marked clean, their bytes never reach the disk", path)
        if self.real_fsync:
            real(fd, data_only=data_only)
        with self._lock:  # read and stored in one go: the last fsync's bytes win
            data = _read_fd(fd)
            bad = min(self._poisoned.get(fid, 0), len(data))
            if bad:
                data = self._content.get(fid, b"").ljust(bad, b"\0")[:bad] + data[bad:]
            self._content[fid] = data
            self.events.append(FsyncEvent("file", rel, True))

    def fsync_dir(self, path: str, real: Callable[[str], None]) -> None:
        rel = self._rel(path)
        with self._lock:
            if self._fails("dir", rel):
                raise OSError(errno.EIO, "injected EIO on a directory fsync", path)
        if self.real_fsync:
            real(path)
        with self._lock:  # listed and stored in one go: the last fsync's listing wins
            self._dirs[rel] = _list_dir(path)
            self.events.append(FsyncEvent("dir", rel, True))

    # -- the power cut -------------------------------------------------------------------------

    def image(self) -> DurableImage:
        """The durable state now (for a power cut that happens at this very instant)."""
        with self._lock:
            return DurableImage({d: dict(listing) for d, listing in self._dirs.items()}, dict(self._content), dict(self._poisoned), self._read_kept())

    def power_cut(self, image: DurableImage | None = None) -> PowerCutReport:
        """Rewrite the tree to ``image`` (default: its durable state now). Whatever holds files
        of the tree open (a writer, its threads) must be stopped first. Afterwards the whole
        tree is durable, as a disk is after the machine restarts."""
        with self._lock:
            image = image or self.image()
            before = _read_tree(self.root)
            for name in os.listdir(self.root):
                path = os.path.join(self.root, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            self._write_dir("", image, {})
            for rel, data in image.kept.items():
                target = os.path.join(self.root, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as fh:
                    fh.write(data)
            after = _read_tree(self.root)
            self._rules = [r for r in self._rules if r.count < r.nth]
            self._baseline()
        return PowerCutReport(
            vanished=sorted(set(before) - set(after)),
            reappeared=sorted(set(after) - set(before)),
            changed=sorted(p for p in set(before) & set(after) if before[p] != after[p]),
        )

    def _write_dir(self, rel: str, image: DurableImage, links: dict[FileId, str]) -> None:
        for name, entry in sorted(image.dirs.get(rel, {}).items()):
            child = f"{rel}/{name}" if rel else name
            if self._kept(child):
                continue
            path = os.path.join(self.root, child)
            if entry.fid is None:
                os.mkdir(path)
                self._write_dir(child, image, links)
            elif entry.fid in links:
                os.link(links[entry.fid], path)
            else:
                with open(path, "wb") as fh:
                    fh.write(self._durable_bytes(image, entry))
                links[entry.fid] = path

    def _durable_bytes(self, image: DurableImage, entry: Entry) -> bytes:
        assert entry.fid is not None
        data = image.content.get(entry.fid)
        if data is not None:
            return data
        if entry.fid in image.poisoned:
            return b"\0" * image.poisoned[entry.fid]
        return b"\0" * entry.size if self.lost == "nul" else b""

    # -- state ---------------------------------------------------------------------------------

    def _baseline(self) -> None:
        """Everything in the tree now is durable (a fresh model, or the disk after a restart)."""
        self._dirs.clear()
        self._content.clear()
        self._poisoned.clear()
        for dirpath, _dirs, files in os.walk(self.root):
            self._dirs[self._rel(dirpath)] = _list_dir(dirpath)
            for name in files:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as fh:
                    self._content[_file_id_of_path(path)] = fh.read()

    def _kept(self, rel: str) -> bool:
        return any(k.search(rel) for k in self.keep)

    def _read_kept(self) -> dict[str, bytes]:
        if not self.keep:
            return {}
        return {rel: data for rel, data in _read_tree(self.root).items() if not rel.endswith("/") and self._kept(rel)}

    def _rel(self, path: str) -> str:
        rel = os.path.relpath(os.path.realpath(path), self.root)
        return "" if rel == "." else rel.replace(os.sep, "/")


# -- process-wide hooks ------------------------------------------------------------------------

_hooks_lock = threading.Lock()
_disks: list[PowerCutDisk] = []
_real_fsync_fd: Callable[..., None] = local._fsync_fd
_real_fsync_dir: Callable[[str], None] = local._fsync_dir


def _disk_for(path: str) -> PowerCutDisk | None:
    for disk in list(_disks):
        if disk.contains(path):
            return disk
    return None


def _hooked_fsync_fd(fd: int, *, data_only: bool = False) -> None:
    path = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
    disk = _disk_for(path)
    if disk is None:
        _real_fsync_fd(fd, data_only=data_only)
    else:
        disk.fsync_file(fd, path, data_only, _real_fsync_fd)


def _hooked_fsync_dir(path: str) -> None:
    disk = _disk_for(os.path.realpath(path))
    if disk is None:
        _real_fsync_dir(path)
    else:
        disk.fsync_dir(path, _real_fsync_dir)


def _install(disk: PowerCutDisk) -> None:
    global _real_fsync_fd, _real_fsync_dir
    with _hooks_lock:
        if not _disks:
            _real_fsync_fd, _real_fsync_dir = local._fsync_fd, local._fsync_dir
            setattr(local, "_fsync_fd", _hooked_fsync_fd)  # noqa: B010 - the module's global, by name
            setattr(local, "_fsync_dir", _hooked_fsync_dir)  # noqa: B010
        _disks.append(disk)


def _uninstall(disk: PowerCutDisk) -> None:
    with _hooks_lock:
        if disk in _disks:
            _disks.remove(disk)
        if not _disks:
            setattr(local, "_fsync_fd", _real_fsync_fd)  # noqa: B010
            setattr(local, "_fsync_dir", _real_fsync_dir)  # noqa: B010


# -- files -------------------------------------------------------------------------------------

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_EMPTY_PATH = 0x1000
_STATX_BTIME = 0x800
_STATX_SIZE = 256  # bytes of struct statx
_BTIME_OFFSET = 80  # stx_btime: struct statx_timestamp {i64 tv_sec; u32 tv_nsec; ...}


def _load_statx() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).statx
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return fn


_statx = _load_statx()


def _birth_ns(dirfd: int, path: bytes, flags: int) -> int:
    """The birth time (ns) of a file, or 0 where neither the kernel nor the filesystem tells."""
    if _statx is None:
        return 0
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    if _statx(dirfd, path, flags, _STATX_BTIME, buf) != 0:
        return 0
    mask = struct.unpack_from("I", buf.raw, 0)[0]
    if not mask & _STATX_BTIME:
        return 0
    sec, nsec = struct.unpack_from("qI", buf.raw, _BTIME_OFFSET)
    return int(sec) * 1_000_000_000 + int(nsec)


def _file_id_of_fd(fd: int) -> FileId:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, _birth_ns(fd, b"", _AT_EMPTY_PATH))


def _file_id_of_path(path: str) -> FileId:
    st = os.stat(path, follow_symlinks=False)
    return (st.st_dev, st.st_ino, _birth_ns(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW))


def _read_fd(fd: int) -> bytes:
    with open(f"/proc/self/fd/{fd}", "rb") as fh:
        return fh.read()


def _list_dir(path: str) -> dict[str, Entry]:
    """The directory's entries at one instant, as its fsync would persist them.

    The names come from one read of a small directory (atomic against an unlink); a name gone
    before its stat means another thread changed the directory meanwhile, so the whole listing
    is taken again - keeping the rest would record a state the directory was never in (a later
    file deleted, an earlier one not yet)."""
    while True:
        out: dict[str, Entry] = {}
        try:
            with os.scandir(path) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        out[entry.name] = Entry(None)
                    else:
                        out[entry.name] = Entry(_file_id_of_path(entry.path), entry.stat(follow_symlinks=False).st_size)
        except FileNotFoundError as exc:
            if exc.filename is not None and os.path.realpath(os.fspath(exc.filename)) == os.path.realpath(path):
                raise
            continue
        return out


def _read_tree(root: str) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes); directories as empty markers."""
    out: dict[str, bytes] = {}
    for dirpath, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in dirs:
            out[os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/") + "/"] = b""
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as fh:
                    out[os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")] = fh.read()
            except FileNotFoundError:
                continue
    return out
