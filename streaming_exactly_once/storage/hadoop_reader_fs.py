"""A read-only fsspec filesystem over ``HadoopStorage``, so Arrow/DuckDB/Polars readers can
read an ``hdfs://`` table through the Spark driver's JVM (no libhdfs, no second client).

Only what the readers need: ``ls``/``info`` and ranged reads (each range is one
``seek`` + ``readNBytes`` on a fresh JVM stream; py4j returns Java ``byte[]`` results as
Python ``bytes``, while a buffer passed *into* Java would come back unfilled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

if TYPE_CHECKING:
    from .hadoop import HadoopStorage


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
        return path[len(root) + 1:]

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
