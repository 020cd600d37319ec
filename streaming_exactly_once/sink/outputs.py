"""``Output``: one destination of a ``DatasetSink`` - a table, or one table per dataset.

::

    Output("raw")                                              -> <root>/raw/
    Output("clean", format="json", transform=clean_up)         -> <root>/clean/ (a fork: own transform)
    Output("events", dataset_column="topic")                   -> <root>/events/<topic value>/
    DatasetSink(root, dataset_column="topic")                  -> <root>/<topic value>/ (one implicit output)

Every output of a sink gets every batch, in one commit sequence: after a crash either all of
them have the batch or none. Options left as ``None`` fall back to the sink's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .checks import Check


@dataclass(frozen=True)
class Output:
    name: str = ""
    transform: Callable[[Any], Any] | None = None  # DataFrame -> DataFrame
    format: str | None = None
    partition_by: Sequence[str] | None = None  # a str names one column; kept as a tuple
    options: Mapping[str, str] | None = None
    checks: Sequence[Check] | None = None  # kept as a tuple
    dataset_column: str | None = None

    def __post_init__(self) -> None:
        check_table_path(self.name, what="Output name", allow_empty=True)
        if isinstance(self.format, str):  # Spark's format() takes any case
            object.__setattr__(self, "format", self.format.lower())
        if self.transform is not None and not callable(self.transform):
            raise ConfigError(f"Output {self.name!r}: transform must be a callable DataFrame -> DataFrame", key="outputs")
        if self.partition_by is not None:
            columns = (self.partition_by,) if isinstance(self.partition_by, str) else tuple(self.partition_by)
            object.__setattr__(self, "partition_by", columns)
        if self.checks is not None:
            object.__setattr__(self, "checks", tuple(self.checks))

    def table_for(self, dataset: str | None) -> str:
        """The table path under the root for a dataset value (or the output itself).

        A NULL value, or one whose directory name would not fit in ``NAME_MAX_BYTES``, gets a
        fixed name starting with ``_`` (which ``dataset_dir_name`` never produces): only the
        quarantine uses it, since such rows have no table to land in.
        """
        if self.dataset_column is None:
            return self.name
        if dataset is None:
            leaf = NULL_DATASET
        else:
            leaf = dataset_dir_name(dataset) if dataset_fits(dataset) else TOO_LONG_DATASET
        return f"{self.name}/{leaf}" if self.name else leaf


#: The table of rows whose dataset value is NULL (they go to quarantine: no dataset to land in).
NULL_DATASET = "__null__"

#: The table of rows whose dataset value is too long for a directory name (``fits_in_name``).
TOO_LONG_DATASET = "__too_long__"

#: The longest file or directory name, in bytes, that common filesystems accept (``NAME_MAX`` on
#: Linux; ext4, xfs, btrfs, APFS and NTFS all stop near it). A row that needs a longer directory
#: name can never be written, so every retry of its batch would fail: the group writer sends such
#: rows to quarantine instead.
NAME_MAX_BYTES = 255


def fits_in_name(name: str) -> bool:
    """Whether ``name`` can be one component of a path (see ``NAME_MAX_BYTES``)."""
    return len(name.encode("utf-8")) <= NAME_MAX_BYTES


def dataset_fits(value: str) -> bool:
    """Whether a dataset value can have a table of its own (its directory name fits)."""
    return fits_in_name(dataset_dir_name(value))


def dataset_dir_name(value: str) -> str:
    """A dataset value as a directory name, the same on every filesystem and in every URI.

    Letters and digits (any script), space, ``-``, ``.`` and ``_`` stay; every other character is
    written as ``~`` plus the hex of its UTF-8 bytes (``c%d`` -> ``c~25d``, ``a/b`` -> ``a~2Fb``).
    ``~`` is unreserved in URIs, so the name needs no URI escaping (a ``%`` would); a leading
    ``_`` or ``.`` is escaped too, so no dataset is hidden from readers; ``=`` is escaped, so no
    dataset looks like a partition directory.
    """
    out = []
    for i, ch in enumerate(str(value)):
        keep = ch.isalnum() or ch in " -._"
        if not keep or (i == 0 and ch in "._"):
            out.append("".join(f"~{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out) or "~"


def check_table_path(path: str, *, what: str, allow_empty: bool = False) -> None:
    if not isinstance(path, str) or (not path and not allow_empty):
        raise ConfigError(f"{what} must be a non-empty relative path, got {path!r}", key="outputs")
    for part in path.split("/") if path else []:
        if not part or part in (".", "..") or part.startswith(("_", ".")):
            raise ConfigError(
                f"{what} {path!r}: each part must be a plain name not starting with '_' or '.' (those are hidden "
                "from readers, and '_quarantine' is the sink's own)",
                key="outputs",
            )
        if not fits_in_name(part):
            raise ConfigError(
                f"{what} {path!r}: the part {part[:40]!r}... is {len(part.encode('utf-8'))} bytes long; directory "
                f"names may have at most {NAME_MAX_BYTES} bytes. Use a shorter name.",
                key="outputs",
            )


def resolve_outputs(*, outputs: tuple[Output, ...], dataset_column: str | None) -> tuple[Output, ...]:
    """The sink's outputs: explicit ones, or one implicit output split by ``dataset_column``."""
    if outputs and dataset_column:
        raise ConfigError(
            "give either dataset_column (one table per dataset under the root) or outputs (each may set its own dataset_column), not both",
            key="dataset_column",
        )
    if not outputs:
        if not dataset_column:
            raise ConfigError(
                "DatasetSink needs dataset_column='<column>' (one table per value) or outputs=[Output(...), ...]",
                key="outputs",
            )
        return (Output("", dataset_column=dataset_column),)
    names = [o.name for o in outputs]
    if any(not n for n in names):
        raise ConfigError("every explicit Output needs a name (its directory under the root)", key="outputs")
    for a in names:
        for b in names:
            if a != b and (b + "/").startswith(a + "/"):
                raise ConfigError(f"outputs {a!r} and {b!r} nest inside each other; give them separate paths", key="outputs")
    if len(set(names)) != len(names):
        raise ConfigError(f"two outputs are named the same: {sorted(n for n in names if names.count(n) > 1)[0]!r}", key="outputs")
    return tuple(outputs)
