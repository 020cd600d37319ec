"""``CommittedFiles``: the data files of one snapshot of a table, as every reader receives them.

``readers.visibility.committed_files`` decides which files these are; this class only holds
them - relative to the table root, with their sizes and modification times from the manifest,
plus what a reader needs to open them (format, writer options, schema, partition columns, and
for a Delta table the Delta version that is the same snapshot).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..storage.base import Storage
from ..table.identity import TableIdentity

#: Rows of an Arrow column turned into Python objects at a time (``CommittedFiles.prefixed``).
_SLICE_ROWS = 1 << 14
#: Bytes of converted Arrow pieces after which ``CommittedFiles.pop_uris`` hands memory back.
_RELEASE_BYTES = 8 << 20
#: Columns up to this many rows are prefixed by Arrow at once (``CommittedFiles.prefixed``).
_JOIN_IN_ARROW_ROWS = 1 << 18


class CommittedFiles:
    """The committed data files of one snapshot of a table.

    Columns are kept as Arrow arrays when pyarrow is installed (a million entries stay cheap)
    and turned into Python lists only when asked for.
    """

    def __init__(self, storage: Storage, as_of: int | None, identity: TableIdentity | None = None, *, allow_outside_root: bool = False) -> None:
        self.storage = storage
        self.as_of = as_of
        self.identity = identity
        self.allow_outside_root = allow_outside_root
        self.outside: list[str] = []  # absolute URIs (allow_outside_root only)
        self.schema_json: str | None = None
        self.partition_columns: tuple[str, ...] = ()
        #: Delta tables: the Delta version that is this snapshot (None: not a Delta table, or
        #: the version is no longer in the Delta log)
        self.delta_version: int | None = None
        self._columns: dict[str, Any] = {"relative": [], "sizes": [], "mtimes": []}

    def set_columns(self, relative: Any, sizes: Any, mtimes: Any) -> None:
        self._columns = {"relative": relative, "sizes": sizes, "mtimes": mtimes}

    def _list(self, name: str) -> list[Any]:
        value = self._columns[name]
        if not isinstance(value, list):
            value = self._columns[name] = value.to_pylist()
        values: list[Any] = value
        return values

    def relative_sizes(self) -> Iterator[tuple[str, int]]:
        """(relative path, size) of each file, converted a slice at a time and kept nowhere:
        ``relative`` and ``sizes`` would keep two lists of a million objects next to the Arrow
        columns for the rest of the read (``file_checks`` walks them once)."""
        relative, sizes = self._columns["relative"], self._columns["sizes"]
        if isinstance(relative, list) or isinstance(sizes, list):
            yield from zip(self.relative, self.sizes, strict=True)
            return
        for start in range(0, len(relative), _SLICE_ROWS):
            names = relative.slice(start, _SLICE_ROWS).to_pylist()
            yield from zip(names, sizes.slice(start, _SLICE_ROWS).to_pylist(), strict=True)

    @property
    def relative(self) -> list[str]:
        return self._list("relative")

    @property
    def sizes(self) -> list[int]:
        return self._list("sizes")

    @property
    def mtimes(self) -> list[int]:
        return self._list("mtimes")

    def __len__(self) -> int:
        return len(self._columns["relative"]) + len(self.outside)

    def sample(self) -> str | None:
        """One relative path (or outside URI), without converting a whole column."""
        value = self._columns["relative"]
        if len(value):
            first: str = value[0] if isinstance(value, list) else value[0].as_py()
            return first
        return self.outside[0] if self.outside else None

    def prefixed(self, prefix: str) -> list[str]:
        """``prefix`` + each relative path.

        A large Arrow column is converted a slice at a time into a list made at its full length
        once, the prefix added in Python: the list of a million strings is what the caller
        asked for, and a joined Arrow copy of the column or a list grown step by step next to
        it raised the peak (by 35 MB at a million paths, even joining slice by slice). A
        smaller column is joined by Arrow at once, which is faster (about 10 ms at 100k paths)."""
        value = self._columns["relative"]
        if isinstance(value, list):
            return [prefix + r for r in value]
        if len(value) <= _JOIN_IN_ARROW_ROWS:
            import pyarrow.compute as pc

            small: list[str] = pc.binary_join_element_wise(prefix, value, "").to_pylist()
            return small
        joined: list[str] = [""] * len(value)
        for start in range(0, len(value), _SLICE_ROWS):
            part = value.slice(start, _SLICE_ROWS).to_pylist()
            joined[start : start + len(part)] = [prefix + r for r in part]
        return joined

    def uris(self) -> list[str]:
        return self.prefixed(self.storage.root_uri + "/") + list(self.outside)

    def pop_uris(self) -> list[str]:
        """``uris``, emptying this object: each Arrow piece of the relative paths is let go (and
        its memory handed back) as soon as it is converted, so the list of a million strings
        (about 160 MB) does not grow beside the 66 MB of columns it replaces."""
        relative = self._columns["relative"]
        if isinstance(relative, list) or len(relative) <= _JOIN_IN_ARROW_ROWS:
            uris = self.uris()
            self.set_columns([], [], [])
            self.outside = []
            return uris
        self.set_columns([], [], [])
        pieces = list(relative.chunks)
        del relative
        from .manifest_scan import release_arrow_memory

        prefix = self.storage.root_uri + "/"
        joined: list[str] = [""] * sum(len(piece) for piece in pieces)
        start = freed = 0
        pieces.reverse()  # popped from the end, in table order
        while pieces:
            piece = pieces.pop()
            for offset in range(0, len(piece), _SLICE_ROWS):
                part = piece.slice(offset, _SLICE_ROWS).to_pylist()
                joined[start : start + len(part)] = [prefix + r for r in part]
                start += len(part)
            freed += piece.nbytes
            del piece, part
            if freed >= _RELEASE_BYTES:
                release_arrow_memory()
                freed = 0
        outside, self.outside = self.outside, []
        return joined + outside

    @property
    def total_bytes(self) -> int:
        value = self._columns["sizes"]
        if isinstance(value, list):
            return sum(value)
        import pyarrow.compute as pc

        total: int = pc.sum(value).as_py() or 0  # no Python list of every size just for a sum
        return total

    def file_format(self, override: str | None = None) -> str:
        """The data files' format: as asked, as recorded by the sink, or guessed from a name."""
        if override:
            return override
        if self.identity is not None:
            return self.identity.format
        sample = self.sample() or ""
        for ext in ("parquet", "json", "csv", "orc"):
            if sample.endswith(f".{ext}") or f".{ext}." in sample:
                return ext
        return "parquet"

    def reader_options(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The writer options recorded with the table (CSV ``header``, ``sep``), then ``extra``."""
        options = dict(self.identity.writer_options) if self.identity is not None else {}
        options.update(extra or {})
        return options
