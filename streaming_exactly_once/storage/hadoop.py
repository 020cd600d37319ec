"""Storage through the running Spark driver's Hadoop filesystem API (py4j), for ``hdfs://``.

Why: a cluster's Spark already reaches HDFS with its own configuration and credentials
(Kerberos, ``core-site.xml``); going through the driver JVM's ``FileContext``/``FileSystem``
needs no second client and no second set of credentials. ``hdfs://`` URIs open this backend;
``hadoop+<scheme>://`` opts into it for another scheme (``hadoop+file:///tmp/t`` runs the
same code on Hadoop's local filesystem, which is how it is tested here).

Exclusive primitives (what really arbitrates, per filesystem):

* **HDFS**: ``FileContext.rename(tmp, final, Rename.NONE)``. The NameNode checks and renames
  under its namespace lock, so of concurrent renames onto one name exactly one succeeds and the
  others get ``FileAlreadyExistsException`` - the primitive Spark's
  ``FileContextBasedCheckpointFileManager`` relies on. ``put_if_absent`` writes a hidden temp
  file (``.<name>.<uuid>.tmp``, same directory), ``hsync``s and closes it, then renames it
  without overwrite, so the final name appears complete or not at all. (Not run here: no
  HDFS; see the README.)
* **Local disk through Hadoop** (``hadoop+file://``): Hadoop is NOT exclusive there. Both
  ``FileContext.create`` without ``OVERWRITE`` and ``rename(..., NONE)`` are an existence
  check followed by ``open``/``rename(2)``, and racing threads both win (the tests show it).
  So on ``file:`` the temp file is published with ``java.nio.file.Files.createLink`` - the
  JVM's ``link(2)``, which fails with ``EEXIST`` atomically - then the temp name is removed.
  The same JVM, no Hadoop call, but the exclusive step is the kernel's.
* Other schemes (``s3a``, ``abfs``, ``gs``, ...) are refused: their connectors' rename is a
  client-side copy and their create's exclusivity depends on connector versions and settings
  this library cannot check. Use the native ``s3://``, ``abfs://`` or ``gs://`` backends.

Only the driver can use this backend (Python workers have no JVM handle), so it is marked
``usable_on_executors = False``: the sink stages with Spark's own writer (``rename`` mode, the
default here, since HDFS renames are atomic) and never ships it to a worker.

The JVM comes from ``use_jvm_of(spark_context)`` or, by default, from the SparkContext already
running in this process (found through the loaded ``pyspark`` module; the storage layer never
imports pyspark).
"""

from __future__ import annotations

import contextlib
import errno
import io
import posixpath
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any
from urllib.parse import urlsplit

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from ..errors import StorageAccessError, UnsupportedStorageError
from .base import FileInfo, Storage, check_relative, temp_sibling_name

#: Filesystems whose no-overwrite rename is known to be atomic and exclusive.
RENAME_EXCLUSIVE = ("hdfs",)

_provider: Callable[[], Any] | None = None
_lock = threading.Lock()


def use_jvm_of(spark_context: Any) -> None:
    """Use this SparkContext's JVM for every ``HadoopStorage`` (default: the active one)."""
    global _provider
    _provider = lambda: spark_context  # noqa: E731


def _spark_context() -> Any:
    if _provider is not None:
        sc = _provider()
    else:
        module = sys.modules.get("pyspark")
        sc = getattr(getattr(module, "SparkContext", None), "_active_spark_context", None)
    if sc is None or getattr(sc, "_jsc", None) is None:
        raise UnsupportedStorageError(
            "hdfs:// and hadoop+ storage goes through the Spark driver's JVM, and no SparkContext is running in "
            "this process (Spark Connect clients have none either). Start a SparkSession first, or read the "
            "table through its native scheme (file://, s3://, abfs://, gs://)."
        )
    return sc


def _java_class(exc: BaseException) -> str | None:
    """The Java exception class behind a py4j error (None for other errors)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return None
    try:
        return str(java.getClass().getName())
    except Exception:
        return None


_NOT_FOUND = ("java.io.FileNotFoundException", "java.nio.file.NoSuchFileException")
_EXISTS = ("org.apache.hadoop.fs.FileAlreadyExistsException", "java.nio.file.FileAlreadyExistsException")
_DENIED = ("org.apache.hadoop.security.AccessControlException", "java.nio.file.AccessDeniedException")


class _Jvm:
    """Handles to the JVM objects one filesystem needs (per process; never pickled)."""

    def __init__(self, fs_uri: str, local: bool) -> None:
        sc = _spark_context()
        self.jvm, self.gateway = sc._jvm, sc._gateway
        H = self.jvm.org.apache.hadoop.fs
        self.H = H
        conf = self.jvm.org.apache.hadoop.conf.Configuration(sc._jsc.hadoopConfiguration())
        if local:  # the raw local filesystem: no .crc side files next to every file
            conf.set("fs.AbstractFileSystem.file.impl", "org.apache.hadoop.fs.local.RawLocalFs")
            conf.set("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
            conf.setBoolean("fs.file.impl.disable.cache", True)
        uri = self.jvm.java.net.URI(fs_uri)
        self.fc = H.FileContext.getFileContext(uri, conf)
        self.fs = H.FileSystem.newInstance(uri, conf)
        self.Rename = getattr(H, "Options$Rename")
        self.CreateOpts = getattr(H, "Options$CreateOpts")

    def flags(self, *names: str) -> Any:
        flag = self.H.CreateFlag
        rest = [getattr(flag, n) for n in names[1:]]
        return self.jvm.java.util.EnumSet.of(getattr(flag, names[0]), *rest)

    def create_parent(self) -> Any:
        opts = self.gateway.new_array(self.CreateOpts, 1)
        opts[0] = self.CreateOpts.createParent()
        return opts

    def rename_opts(self, overwrite: bool) -> Any:
        opts = self.gateway.new_array(self.Rename, 1)
        opts[0] = self.Rename.OVERWRITE if overwrite else self.Rename.NONE
        return opts


class _JavaWriter(io.RawIOBase):
    """A Python binary writer over a Hadoop ``FSDataOutputStream``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        if data:
            self._stream.write(bytearray(data))
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._stream.hsync()
                self._stream.close()
            finally:
                super().close()


class HadoopStorage(Storage):
    """Storage on a Hadoop filesystem, driven through the Spark driver's JVM."""

    rename_is_atomic = True
    writes_temp_siblings = True
    usable_on_executors = False

    def __init__(self, root_uri: str, options: dict[str, Any] | None = None) -> None:
        plain = root_uri[len("hadoop+") :] if root_uri.lower().startswith("hadoop+") else root_uri
        parts = urlsplit(plain)
        scheme = parts.scheme.lower()
        if scheme not in RENAME_EXCLUSIVE and scheme != "file":
            raise UnsupportedStorageError(
                f"{root_uri!r}: the Hadoop backend supports hdfs:// (atomic no-overwrite rename on the NameNode) and "
                f"file: (for tests); {scheme}:// through Hadoop's connector has no create-if-absent this library can "
                "rely on. Use the native backend for object stores: s3://, abfs:// or gs://."
            )
        self._local = scheme == "file"
        path = "/" + parts.path.strip("/")
        self.root_uri = (f"file://{path}" if self._local else f"{scheme}://{parts.netloc}{path}").rstrip("/")
        self._fs_uri = "file:///" if self._local else f"{scheme}://{parts.netloc}/"
        self._path_root = path.rstrip("/") or "/"
        self._options = dict(options or {})
        self._shared: dict[str, _Jvm | None] = {"jvm": None}  # one JVM handle for the storage and its children

    # -- plumbing ----------------------------------------------------------------------------

    @property
    def _j(self) -> _Jvm:
        jvm = self._shared["jvm"]
        if jvm is None:
            with _lock:
                jvm = self._shared["jvm"]
                if jvm is None:
                    jvm = self._shared["jvm"] = _Jvm(self._fs_uri, self._local)
        return jvm

    def _abs(self, path: str) -> str:
        rel = check_relative(path)
        return posixpath.join(self._path_root, rel) if rel else self._path_root

    def _hpath(self, path: str) -> Any:
        return self._j.H.Path(self.uri(path))

    @contextlib.contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        """py4j errors as Python's: missing -> FileNotFoundError, exists -> FileExistsError."""
        try:
            yield
        except Exception as exc:
            cls = _java_class(exc)
            if cls is None:
                raise
            uri = self.uri(path)
            if cls in _NOT_FOUND:
                raise FileNotFoundError(errno.ENOENT, "no such file", uri) from None
            if cls in _EXISTS:
                raise FileExistsError(errno.EEXIST, "file exists", uri) from None
            if cls in _DENIED:
                raise StorageAccessError(
                    uri=uri,
                    reason="credentials",
                    detail=f"the filesystem refused access ({cls.rsplit('.', 1)[-1]})",
                    hint="Check the cluster's Hadoop credentials (Kerberos ticket, permissions) for this path.",
                ) from exc
            raise

    def _link(self, existing: str, new: str) -> None:
        """``link(2)`` in the JVM: atomic, and fails if ``new`` exists (local disk only)."""
        jvm = self._j.jvm
        jvm.java.nio.file.Files.createLink(jvm.java.io.File(self._abs(new)).toPath(), jvm.java.io.File(self._abs(existing)).toPath())

    def _temp_for(self, path: str) -> str:
        head, name = posixpath.split(check_relative(path))
        return posixpath.join(head, temp_sibling_name(name))

    def _write_file(self, path: str, data: bytes, *, overwrite: bool) -> None:
        j = self._j
        names = ("CREATE", "OVERWRITE") if overwrite else ("CREATE",)
        with self._errors(path):
            stream = j.fc.create(self._hpath(path), j.flags(*names), j.create_parent())
            with _JavaWriter(stream) as out:
                out.write(data)

    def _publish(self, tmp: str, final: str, *, overwrite: bool = False) -> None:
        """Give ``tmp`` the name ``final``; without ``overwrite`` exactly one racer wins."""
        j = self._j
        try:
            with self._errors(final):
                if self._local and not overwrite:
                    self._link(tmp, final)
                    self._delete_quiet(tmp)
                elif self._local:  # Hadoop's local rename with OVERWRITE deletes, then renames
                    self._replace(tmp, final)
                else:
                    j.fc.rename(self._hpath(tmp), self._hpath(final), j.rename_opts(overwrite))
        except BaseException:
            self._delete_quiet(tmp)
            raise

    def _replace(self, src: str, dst: str) -> None:
        """``rename(2)`` in the JVM: replaces ``dst`` atomically (local disk only)."""
        j = self._j
        nio = j.jvm.java.nio.file
        opts = j.gateway.new_array(nio.CopyOption, 1)
        opts[0] = nio.StandardCopyOption.ATOMIC_MOVE
        nio.Files.move(j.jvm.java.io.File(self._abs(src)).toPath(), j.jvm.java.io.File(self._abs(dst)).toPath(), opts)

    def _delete_quiet(self, path: str) -> None:
        with contextlib.suppress(Exception):
            self._j.fs.delete(self._hpath(path), False)

    # -- Storage -----------------------------------------------------------------------------

    def child(self, path: str) -> HadoopStorage:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        rel = check_relative(path)
        clone.root_uri = self.uri(rel)
        clone._path_root = self._abs(rel)
        return clone

    def read_bytes(self, path: str) -> bytes:
        with self._errors(path):
            stream = self._j.fs.open(self._hpath(path))
            try:
                return bytes(stream.readAllBytes())
            finally:
                stream.close()

    def _read_range(self, path: str, start: int, length: int) -> bytes:
        with self._errors(path):
            stream = self._j.fs.open(self._hpath(path))
            try:
                stream.seek(start)
                return bytes(stream.readNBytes(length))
            finally:
                stream.close()

    def read_head(self, path: str, n: int) -> bytes:
        return self._read_range(path, 0, n)

    def read_tail(self, path: str, n: int) -> bytes:
        size = self.info(path).size
        return self._read_range(path, max(0, size - n), min(n, size))

    def _to_info(self, status: Any, rel: str) -> FileInfo:
        return FileInfo(rel, int(status.getLen()), int(status.getModificationTime()), bool(status.isDirectory()))

    def info(self, path: str) -> FileInfo:
        with self._errors(path):
            return self._to_info(self._j.fs.getFileStatus(self._hpath(path)), check_relative(path))

    def list_dir(self, path: str = "") -> list[FileInfo]:
        rel = check_relative(path)
        try:
            with self._errors(path):
                statuses = self._j.fs.listStatus(self._hpath(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for status in statuses:
            name = str(status.getPath().getName())
            out.append(self._to_info(status, posixpath.join(rel, name) if rel else name))
        if len(out) == 1 and not out[0].is_dir and out[0].path == rel:
            return []  # listing a file gives the file itself
        return out

    def put_if_absent(self, path: str, data: bytes) -> None:
        tmp = self._temp_for(path)
        self._write_file(tmp, bytes(data), overwrite=True)
        self._publish(tmp, path)

    def atomic_write(self, path: str, data: bytes) -> None:
        tmp = self._temp_for(path)
        self._write_file(tmp, bytes(data), overwrite=True)
        self._publish(tmp, path, overwrite=True)

    def open_write(self, path: str) -> IO[bytes]:
        j = self._j
        with self._errors(path):
            stream = j.fc.create(self._hpath(path), j.flags("CREATE"), j.create_parent())
        return io.BufferedWriter(_JavaWriter(stream), buffer_size=1 << 20)

    def rename(self, src: str, dst: str) -> None:
        if not self.exists(src):
            raise FileNotFoundError(errno.ENOENT, "rename source missing", self.uri(src))
        self.makedirs(posixpath.dirname(check_relative(dst)))
        j = self._j
        with self._errors(dst):
            if self._local:
                self._link(src, dst)
                j.fs.delete(self._hpath(src), False)
            else:
                j.fc.rename(self._hpath(src), self._hpath(dst), j.rename_opts(False))

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        with self._errors(path):
            deleted = bool(self._j.fs.delete(self._hpath(path), False))
        if not deleted and not missing_ok:
            raise FileNotFoundError(errno.ENOENT, "no such file", self.uri(path))

    def delete_tree(self, path: str) -> None:
        if check_relative(path) == "":
            raise ValueError("refusing to delete a storage root")
        with self._errors(path):
            self._j.fs.delete(self._hpath(path), True)

    def makedirs(self, path: str) -> None:
        with self._errors(path):
            self._j.fs.mkdirs(self._hpath(path))

    def filesystem(self) -> tuple[Any, str]:
        """A local fsspec filesystem on ``file:``; elsewhere a read-only one over the JVM."""
        if self._local:
            import fsspec

            return fsspec.filesystem("file"), self._path_root

        return HadoopReadFileSystem(self), self._path_root

    def options(self) -> dict[str, Any]:
        return dict(self._options)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_shared"] = {"jvm": None}
        return state


# -- a read-only fsspec filesystem over the storage -------------------------------------------
#
# So Arrow/DuckDB/Polars readers can read an ``hdfs://`` table through the Spark driver's JVM (no
# libhdfs, no second client). Only what the readers need: ``ls``/``info`` and ranged reads (each
# range is one ``seek`` + ``readNBytes`` on a fresh JVM stream; py4j returns Java ``byte[]``
# results as Python ``bytes``, while a buffer passed *into* Java would come back unfilled).


class HadoopReadFileSystem(AbstractFileSystem):  # type: ignore[misc]  # fsspec has no type information
    """Absolute paths (``/user/t/part-0.parquet``) on the storage's filesystem."""

    protocol = "seo-hadoop"
    cachable = False

    def __init__(self, storage: HadoopStorage, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._storage = storage

    def _rel(self, path: str) -> str:
        path = self._strip_protocol(path).rstrip("/")
        root = self._storage._path_root.rstrip("/")
        if path == root:
            return ""
        if not path.startswith(root + "/"):
            raise FileNotFoundError(path)
        return path[len(root) + 1 :]

    def _entry(self, rel: str, size: int, is_dir: bool) -> dict[str, Any]:
        name = self._storage._abs(rel)
        return {"name": name, "size": size, "type": "directory" if is_dir else "file"}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[dict[str, Any]] | list[str]:
        rel = self._rel(path)
        info = self._storage.info(rel)
        entries = [info] if not info.is_dir else self._storage.list_dir(rel)
        out = [self._entry(e.path, e.size, e.is_dir) for e in entries]
        return out if detail else [e["name"] for e in out]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        info = self._storage.info(self._rel(path))
        return self._entry(info.path, info.size, info.is_dir)

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> _HadoopFile:
        if mode != "rb":
            raise PermissionError("the Hadoop reader filesystem is read-only")
        return _HadoopFile(self, path, mode, block_size=block_size or 4 * 2**20, **kwargs)


class _HadoopFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec has no type information
    def _fetch_range(self, start: int, end: int) -> bytes:
        fs: HadoopReadFileSystem = self.fs
        return fs._storage._read_range(fs._rel(self.path), start, max(0, end - start))
