"""Which manifest entries are inside a table, and where each of them is now.

Manifest paths are absolute URIs under the root the writer used. Over its life a table can have
several such roots - written through a symlink and the real path (refused since; older tables), moved and then
written at its new place - and ``_seo/table`` records every one (``TableIdentity.root_uris``;
for a table of Spark's own sink the root is inferred from an entry). The table's *roots* are
those, the root it is opened at now and, on a local disk, that root with symlinks resolved.

An entry is **inside** the table when it starts with a spelling (``paths.spellings``: ``s3``/
``s3a``/``s3n``, ``file:/``/``file:///``/``file://localhost/``) of one of the roots plus ``/``,
and its rest, percent-decoded and normalised, stays below the root. ``..`` segments, raw or
percent-encoded (``p=a/%2E%2E%2F%2E%2E%2Fx``), that climb out of the root make it **outside**,
like an entry under another directory. Inside entries are read at the *current* root plus the
rest; outside ones are refused (``ManifestEntryOutsideRootError``) unless the caller allows them.

The mapping runs vectorised on Arrow arrays (a million entries in a fraction of a second);
entries that need decoding or normalising, and every entry when pyarrow is missing, go through
``relative_path``, the one definition both ways follow.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ..errors import ManifestEntryOutsideRootError
from ..manifest.paths import canonical_uri, decode_uri, encode_uri, normalize_uri, spellings, split_uri
from ..storage.base import Storage
from ..table.identity import TableIdentity

#: A relative path that ``posixpath.normpath`` would change (RE2 and Python syntax alike).
_NOT_NORMAL = r"(^|/)\.{1,2}(/|$)|//|^/|/$"
_NOT_NORMAL_RE = re.compile(_NOT_NORMAL)
#: A relative path ``below_root`` must look at: escaped, not normal, or empty (one regex pass).
_NEEDS_PYTHON = "%|^$|" + _NOT_NORMAL


@dataclass(frozen=True)
class TableRoots:
    """The roots of one table: ``current`` (where it is read) and every prefix that is inside."""

    current: str
    roots: tuple[str, ...]  # unencoded, canonical, for messages
    prefixes: tuple[str, ...]  # URI-encoded spellings + "/", the longest root's first

    def describe(self) -> str:
        return self.roots[0] if len(self.roots) == 1 else "any of " + ", ".join(self.roots)


def infer_original_root(paths: list[str]) -> str | None:
    """For manifests without ``_seo/table``: strip file names and ``k=v`` directories."""
    if not paths:
        return None
    sample = normalize_uri(paths[0])
    head = posixpath.dirname(sample)
    while posixpath.basename(head).find("=") > 0:
        head = posixpath.dirname(head)
    try:
        return decode_uri(head)
    except UnicodeDecodeError:
        return head


def _local_real_root(storage: Storage) -> str | None:
    """The current root with symlinks resolved, on a local disk (None elsewhere)."""
    if storage.scheme != "file":
        return None
    local = normalize_uri(storage.root_uri)[len("file://") :]
    return "file://" + os.path.realpath(local)


def table_roots(storage: Storage, identity: TableIdentity | None, sample: str | None = None) -> TableRoots:
    """The roots of the table at ``storage`` (``sample``: one manifest path, for a table
    without identity, whose original root is inferred from it)."""
    found: list[str] = []
    if identity is not None:
        found.extend(identity.root_uris)
    else:
        inferred = infer_original_root([sample] if sample else [])
        if inferred is not None:
            found.append(inferred)
    found.append(storage.root_uri)
    real = _local_real_root(storage)
    if real is not None:
        found.append(real)
    roots: list[str] = []
    for root in found:
        canonical = canonical_uri(root)
        if canonical not in roots:
            roots.append(canonical)
    prefixes: list[str] = []
    for root in sorted(roots, key=len, reverse=True):  # a root inside another root matches first
        for spelling in spellings(root):  # the canonical spelling first: it is what writers write
            prefix = encode_uri(spelling).rstrip("/") + "/"
            if prefix not in prefixes:
                prefixes.append(prefix)
    return TableRoots(storage.root_uri, tuple(roots), tuple(prefixes))


def below_root(rest: str) -> str | None:
    """The encoded rest of an entry after its root, decoded and normalised; None if it is not a
    file below the root (it climbs out with ``..``, is absolute, or is the root itself)."""
    if "%" in rest:
        rest = unquote(rest)
    if not _NOT_NORMAL_RE.search(rest):
        return rest or None
    normal = posixpath.normpath(rest)
    if normal.startswith("/") or normal in (".", "..") or normal.startswith("../"):
        return None
    return normal


def relative_path(roots: TableRoots, path: str) -> str | None:
    """Where manifest entry ``path`` is relative to the table root, or None if it is outside."""
    for prefix in roots.prefixes:
        if path.startswith(prefix):
            return below_root(path[len(prefix) :])
    return None


def outside_uri(path: str) -> str:
    """An outside entry as the URI a reader opens: decoded, ``file:///`` form, normalised."""
    prefix, rest = split_uri(normalize_uri(unquote(path)))
    return prefix + (posixpath.normpath(rest) if rest else rest)


def outside_error(storage: Storage, entry: str, roots: TableRoots) -> ManifestEntryOutsideRootError:
    return ManifestEntryOutsideRootError(
        f"Manifest of {storage.root_uri} lists {entry}, which is outside the table root {roots.describe()}. "
        "A reader would silently read another location's data; pass allow_outside_root=True if that "
        "is intended (a table written under another root records it in _seo/table when its writer opens it).",
        entry=entry,
    )


@dataclass
class MappedEntries:
    relative: Any  # Arrow string array or list of paths relative to the current root
    sizes: Any
    mtimes: Any
    outside: list[str]  # URIs of outside entries (only when they are allowed)


def map_entries(
    paths: Any, sizes: Any, mtimes: Any, roots: TableRoots, storage: Storage, *, sub: str = "", allow_outside_root: bool = False
) -> MappedEntries:
    """Split manifest columns into entries inside the table (relative paths, under ``sub`` if
    given) and outside it; raises on outside entries unless ``allow_outside_root``."""
    if isinstance(paths, list):
        return _map_python(paths, sizes, mtimes, roots, storage, sub, allow_outside_root)
    return _map_arrow(paths, sizes, mtimes, roots, storage, sub, allow_outside_root)


def _map_python(
    paths: Sequence[str], sizes: Sequence[int], mtimes: Sequence[int], roots: TableRoots, storage: Storage, sub: str, allow_outside_root: bool
) -> MappedEntries:
    out = MappedEntries([], [], [], [])
    for path, size, mtime in zip(paths, sizes, mtimes, strict=True):
        rel = relative_path(roots, path)
        if rel is None:
            if not allow_outside_root:
                raise outside_error(storage, path, roots)
            out.outside.append(outside_uri(path))
            continue
        if sub and not rel.startswith(sub):
            continue
        out.relative.append(rel)
        out.sizes.append(size)
        out.mtimes.append(mtime)
    return out


def _map_arrow(
    paths: Any, sizes: Any, mtimes: Any, roots: TableRoots, storage: Storage, sub: str, allow_outside_root: bool
) -> MappedEntries:  # pyarrow arrays
    """``_map_python`` vectorised: prefixes matched and sliced by Arrow; only the rows whose rest
    needs decoding or normalising (or that match no prefix) go through ``relative_path``.
    Chunked arrays stay chunked: joining a million paths into one array is a copy of them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(paths):
        return MappedEntries(paths, sizes, mtimes, [])
    rel, matched = None, None
    for prefix in roots.prefixes:
        hit = pc.starts_with(paths, prefix)
        if matched is not None:
            hit = pc.and_(hit, pc.invert(matched))
        if not pc.any(hit).as_py():
            continue
        sliced = pc.utf8_slice_codeunits(paths, len(prefix))
        rel = sliced if rel is None else pc.if_else(hit, sliced, rel)
        del sliced
        matched = hit if matched is None else pc.or_(matched, hit)
        if pc.all(matched).as_py():
            break
    if rel is None:
        odd = pc.is_valid(paths)  # every row: no prefix matched
        rel = pc.utf8_slice_codeunits(paths, 0, 0)
    else:
        odd = pc.invert(pc.and_(matched, pc.invert(pc.match_substring_regex(rel, _NEEDS_PYTHON))))
    outside: list[str] = []
    if pc.any(odd).as_py():
        # only these rows go through Python, in table order (so the same entry is named first)
        odd_rows = pc.indices_nonzero(odd)
        values = []
        for path in paths.take(odd_rows).to_pylist():
            value = relative_path(roots, path)
            if value is None:
                if not allow_outside_root:
                    raise outside_error(storage, normalize_uri(path), roots)
                outside.append(outside_uri(path))
            values.append(value)
        mask = odd.combine_chunks() if isinstance(odd, pa.ChunkedArray) else odd
        rel = pc.replace_with_mask(rel, mask, pa.array(values, pa.string()))
        keep = pc.is_valid(rel)  # outside rows are null now
        rel, sizes, mtimes = rel.filter(keep), sizes.filter(keep), mtimes.filter(keep)
    if sub:
        keep = pc.starts_with(rel, sub)
        rel, sizes, mtimes = rel.filter(keep), sizes.filter(keep), mtimes.filter(keep)
    return MappedEntries(rel, sizes, mtimes, outside)


class ChunkMapper:
    """Maps manifest columns a piece at a time, as a scan reads them (a
    ``manifest_scan.ColumnSink``): each piece's absolute paths can go as soon as it is mapped,
    where mapping whole columns held both copies at once (at a million entries 90 MB of
    absolute paths beside the 50 MB relative ones, and the intermediate arrays of the mapping).

    An entry outside the table is raised from ``result``, after the whole scan, as when the
    columns were mapped whole: an error of the scan (a missing or damaged manifest file) comes
    first. ``roots`` come from the first entry (``table_roots``: a table without identity)."""

    def __init__(self, storage: Storage, identity: TableIdentity | None, *, sub: str = "", allow_outside_root: bool = False) -> None:
        self.storage = storage
        self.identity = identity
        self.sub = sub
        self.allow_outside_root = allow_outside_root
        self.roots: TableRoots | None = None
        self._pieces: list[MappedEntries | None] = []  # None: a piece after an outside entry
        self._error: tuple[int, ManifestEntryOutsideRootError] | None = None

    def add(self, paths: Any, sizes: Any, mtimes: Any) -> None:  # pyarrow arrays
        if self._error is not None or not len(paths):
            self._pieces.append(None)
            return
        if self.roots is None:
            self.roots = table_roots(self.storage, self.identity, paths[0].as_py())
        try:
            self._pieces.append(_map_arrow(paths, sizes, mtimes, self.roots, self.storage, self.sub, self.allow_outside_root))
        except ManifestEntryOutsideRootError as exc:
            self._error = (len(self._pieces), exc)
            self._pieces.append(None)

    def mark(self) -> int:
        return len(self._pieces)

    def rollback(self, mark: int) -> None:
        del self._pieces[mark:]
        if self._error is not None and self._error[0] >= mark:
            self._error = None
        if not any(piece is not None for piece in self._pieces):
            self.roots = None

    def result(self) -> MappedEntries:
        """The pieces mapped, each column one chunked array (no copy); raises the first outside entry."""
        import pyarrow as pa

        if self._error is not None:
            raise self._error[1]
        pieces = [piece for piece in self._pieces if piece is not None]
        self._pieces = []

        def chunks(values: list[Any]) -> list[Any]:
            out: list[Any] = []
            for value in values:
                out.extend(value.chunks if isinstance(value, pa.ChunkedArray) else [value])
            return out

        return MappedEntries(
            pa.chunked_array(chunks([p.relative for p in pieces]), pa.string()),
            pa.chunked_array(chunks([p.sizes for p in pieces]), pa.int64()),
            pa.chunked_array(chunks([p.mtimes for p in pieces]), pa.int64()),
            [uri for p in pieces for uri in p.outside],
        )
