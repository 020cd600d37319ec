"""Are the committed files of a snapshot there as the manifest says, and really inside the table?

* **Absent files**: a committed file that is missing or has another size than recorded. Reading
  without it would silently drop committed rows (``DataFileMissingError``).
* **Links out of the table** (local disks): a committed file that is a symbolic link - or sits
  in a directory that is one - resolving outside the table root. Every engine follows it and
  returns another location's data (``/etc/...``, another table), which is what
  ``allow_outside_root`` exists to make explicit; so it is refused (``SymlinkOutsideRootError``)
  unless outside reads are allowed. Links that stay inside the root are harmless. Object stores
  have no links.

One listing per directory of committed files, never one request per file; on a local disk the
same ``scandir`` gives sizes and links.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import DataFileMissingError, SymlinkOutsideRootError
from ..manifest.paths import normalize_uri
from ..storage.base import Storage

if TYPE_CHECKING:
    from .committed_files import CommittedFiles


@dataclass
class FileProblems:
    absent: list[tuple[str, str]] = field(default_factory=list)  # (URI, what is wrong)
    escapes: list[tuple[str, str]] = field(default_factory=list)  # (URI, where it really is)


def _local_root(storage: Storage) -> str | None:
    if storage.scheme != "file":
        return None
    return normalize_uri(storage.root_uri)[len("file://") :]


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _listing(storage: Storage, local_root: str | None, directory: str) -> dict[str, tuple[int | None, bool]]:
    """name -> (size a reader sees or None if unreadable, is a symbolic link) of the files in ``directory``."""
    if local_root is None:
        return {e.name: (e.size, False) for e in storage.list_dir(directory) if not e.is_dir}
    found: dict[str, tuple[int | None, bool]] = {}
    try:
        entries = os.scandir(os.path.join(local_root, directory) if directory else local_root)
    except (FileNotFoundError, NotADirectoryError):
        return found
    with entries:
        for entry in entries:
            link = entry.is_symlink()
            try:
                if entry.is_dir():
                    continue
                found[entry.name] = (entry.stat().st_size, link)
            except FileNotFoundError:  # vanished, or a link to nothing
                if link:
                    found[entry.name] = (None, True)
    return found


def inspect_files(files: CommittedFiles) -> FileProblems:
    """Every absent file and every link out of the table among ``files``' committed files."""
    storage = files.storage
    by_dir: dict[str, dict[str, int]] = {}
    for rel, size in files.relative_sizes():
        directory, _, name = rel.rpartition("/")
        by_dir.setdefault(directory, {})[name] = size
    local_root = _local_root(storage)
    real_root = os.path.realpath(local_root) if local_root is not None else ""
    problems = FileProblems()
    for directory, expected in by_dir.items():
        present = _listing(storage, local_root, directory)
        real_dir = os.path.realpath(os.path.join(local_root, directory)) if local_root is not None else ""
        dir_escapes = local_root is not None and not _within(real_dir, real_root)
        for name, size in expected.items():
            uri = storage.uri(f"{directory}/{name}" if directory else name)
            found, link = present.get(name, (None, False))
            if local_root is not None and (dir_escapes or link):
                target = os.path.realpath(os.path.join(real_dir, name))
                if not _within(target, real_root):
                    problems.escapes.append((uri, target))
            if found is None or found != size:
                problems.absent.append((uri, "does not exist" if found is None else f"has {found} bytes, the manifest says {size}"))
    return problems


def check_present(files: CommittedFiles) -> None:
    """Every committed file exists with its recorded size (``DataFileMissingError``) and, unless
    ``files.allow_outside_root``, is no link out of the table (``SymlinkOutsideRootError``)."""
    problems = inspect_files(files)
    if problems.escapes and not files.allow_outside_root:
        uri, target = problems.escapes[0]
        more = f" ({len(problems.escapes) - 1} more file(s) affected)" if len(problems.escapes) > 1 else ""
        raise SymlinkOutsideRootError(
            f"Committed data file {uri} is a symbolic link (or in a linked directory) to {target}, outside the "
            f"table root {files.storage.root_uri}{more}. A reader would silently return that location's data. "
            "Replace the link by the file itself, or pass allow_outside_root=True if reading it is intended.",
            entry=uri,
            target=target,
        )
    if problems.absent:
        uri, problem = problems.absent[0]
        more = f" ({len(problems.absent) - 1} more file(s) affected)" if len(problems.absent) > 1 else ""
        raise DataFileMissingError(
            f"Committed data file {uri} {problem}{more}. The manifest (as of batch {files.as_of}) lists it, so "
            "reading without it would silently drop committed rows. Restore the file, or run "
            "`seo verify` to list every affected file.",
            path=uri,
            batch_id=files.as_of,
        )
