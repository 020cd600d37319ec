"""``StorageFileIO``: pyiceberg's file access, routed through the table's own ``Storage``.

pyiceberg writes a commit's manifests and manifest list, and reads the previous manifest list
and manifests, through a ``FileIO``. Giving it one over our storage means the Iceberg layer
works wherever the library does (local disk, S3, Azure, GCS, HDFS) with the credentials the
user gave once, and that every file a commit writes is known by name, so it can be synced
before the metadata file that names it is published (``written``/``publish``).

Locations are absolute (Iceberg stores absolute paths); only locations under the table root,
in any of its spellings (``file:/x``, ``file:///x``, ``/x``; ``s3a://`` for ``s3://``...), are
served - a table naming files elsewhere is refused by the caller before anything is written.
New files are written without a sync of their own (``Storage.without_sync``): ``publish``
syncs all of them at once, right before the commit's point of no return.
"""

from __future__ import annotations

import io
from types import TracebackType

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream

from ..errors import IcebergLocationOutsideRootError
from ..manifest.paths import spellings
from ..storage.base import Storage


def root_spellings(storage: Storage) -> tuple[str, ...]:
    """Prefixes (with a trailing ``/``) that name the table root, the canonical one first."""
    out = [s.rstrip("/") + "/" for s in spellings(storage.root_uri)]
    if storage.scheme == "file":
        out.append(storage.root_uri[len("file://") :].rstrip("/") + "/")
    return tuple(out)


def relative_to(location: str, roots: tuple[str, ...]) -> str | None:
    """``location`` relative to the table root, or None if it is not under it."""
    for root in roots:
        if location.startswith(root):
            return location[len(root) :]
    return None


class _Reader(io.BytesIO):
    """A whole file in memory: manifests and manifest lists are small and read once."""


class _Writer(io.BytesIO):
    """Buffers a new file; on close it appears at once, create-if-absent unless overwriting."""

    def __init__(self, fileio: StorageFileIO, path: str, overwrite: bool, durable: bool) -> None:
        super().__init__()
        self._fileio = fileio
        self._path = path
        self._overwrite = overwrite
        self._durable = durable
        self._done = False

    def close(self) -> None:
        if not self._done and not self.closed:
            self._done = True
            data = self.getvalue()
            super().close()
            self._fileio.store(self._path, data, overwrite=self._overwrite, durable=self._durable)
            return
        super().close()

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, exctype: type[BaseException] | None, excinst: BaseException | None, exctb: TracebackType | None) -> None:
        if exctype is None:
            self.close()
        else:  # a failed write leaves no file behind
            self._done = True
            super().close()


class _File(InputFile, OutputFile):
    def __init__(self, fileio: StorageFileIO, location: str, *, durable: bool = False) -> None:
        InputFile.__init__(self, location)
        self._fileio = fileio
        self._path = fileio.path_of(location)
        self._durable = durable

    def __len__(self) -> int:
        return self._fileio.storage.info(self._path).size

    def exists(self) -> bool:
        return self._fileio.storage.exists(self._path)

    def open(self, seekable: bool = True) -> InputStream:
        return _Reader(self._fileio.storage.read_bytes(self._path))

    def create(self, overwrite: bool = False) -> OutputStream:
        return _Writer(self._fileio, self._path, overwrite, self._durable)

    def to_input_file(self) -> InputFile:
        return self


class StorageFileIO(FileIO):
    """pyiceberg ``FileIO`` over one table's ``Storage`` (see the module docstring)."""

    def __init__(self, storage: Storage) -> None:
        super().__init__({})
        self.storage = storage
        self.roots = root_spellings(storage)
        #: paths (relative to the table root) this FileIO created since the last ``publish``
        self.written: list[str] = []
        #: every path it created since the caller last cleared this (one commit attempt)
        self.created: list[str] = []

    def path_of(self, location: str) -> str:
        path = relative_to(location, self.roots)
        if path is None:
            raise IcebergLocationOutsideRootError(
                f"{location} is not under the table root {self.storage.root_uri}: Iceberg metadata records absolute "
                "locations, so a copied or moved table still names its old place (Iceberg engines read the table there). "
                "Keep the table where its metadata says, or copy it with a tool that rewrites the paths (Iceberg's "
                "rewrite_table_path); readers of the manifest and of Delta are not affected."
            )
        return path

    def location_of(self, path: str) -> str:
        return self.roots[-1 if self.storage.scheme == "file" else 0] + path

    def new_input(self, location: str) -> InputFile:
        return _File(self, location)

    def new_output(self, location: str) -> OutputFile:
        return _File(self, location)

    def new_durable_output(self, location: str) -> OutputFile:
        """An output whose create-if-absent is durable when it returns (a commit's metadata file)."""
        return _File(self, location, durable=True)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        where = location if isinstance(location, str) else location.location
        self.storage.delete(self.path_of(where))

    def store(self, path: str, data: bytes, *, overwrite: bool, durable: bool = False) -> None:
        target = self.storage if durable else self.storage.without_sync()
        if overwrite:
            target.atomic_write(path, data)
        else:
            target.put_if_absent(path, data)
        if not durable:
            self.written.append(path)
        self.created.append(path)

    def publish(self) -> list[str]:
        """Sync every file written since the last call (before a metadata file names them);
        returns their paths. A failed sync raises: the commit must not go ahead."""
        paths, self.written = self.written, []
        self.storage.sync(paths)
        return paths
