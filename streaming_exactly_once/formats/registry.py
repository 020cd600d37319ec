"""The table formats, named once, each loaded on first use.

A format is its ``format=`` name, the extra it needs (``extras.FEATURES``, which names the
``pip install`` line), the error its table raises, whether a table has it (its identity says
so) and the function that opens it, by module path: the format's packages (and so deltalake
or pyiceberg) are imported only when a table of that format is opened, after ``require``
has turned a missing package into a ``MissingDependencyError``. A third format is one package
implementing ``base.TableFormat``, an opener module here, and one entry below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ..errors import DeltaTableError, ExactlyOnceError, IcebergTableError
from ..extras import require
from ..storage.base import Storage
from ..table.identity import TableIdentity
from .base import TableFormat

Opener = Callable[[Storage, TableIdentity], TableFormat]


@dataclass(frozen=True)
class FormatSpec:
    """One table format (see the module docstring)."""

    name: str
    #: the ``extras.FEATURES`` entry its implementation needs
    feature: str
    #: ``"module:function"``, the function opening a table's format from its identity
    opener: str
    #: what its table raises when it does not load
    error: type[ExactlyOnceError]
    #: whether a table, by its identity, is (also) of this format
    present: Callable[[TableIdentity], bool]
    #: the directory of the format's own files under the table (kept whole by ``seo verify``
    #: when its table does not load: which of them it needs is unknown then)
    metadata_dir: str

    def open(self, storage: Storage, identity: TableIdentity) -> TableFormat:
        """The format's table next to the manifest at ``storage``."""
        require(self.feature)
        module, _, name = self.opener.partition(":")
        opener = cast(Opener, getattr(importlib.import_module(module), name))
        return opener(storage, identity)


def _is_delta(identity: TableIdentity) -> bool:
    return identity.delta_app_id is not None


def _is_iceberg(identity: TableIdentity) -> bool:
    return identity.iceberg is not None


#: In commit order: a ``format="delta"`` table with ``iceberg=`` commits to Delta first.
FORMATS: dict[str, FormatSpec] = {
    "delta": FormatSpec("delta", "delta", "streaming_exactly_once.formats.delta:open_table", DeltaTableError, _is_delta, "_delta_log"),
    "iceberg": FormatSpec("iceberg", "iceberg", "streaming_exactly_once.formats.iceberg:open_table", IcebergTableError, _is_iceberg, "metadata"),
}


def formats_of(identity: TableIdentity) -> list[FormatSpec]:
    """The formats a table is (also) committed to, in commit order (none for a plain table)."""
    return [spec for spec in FORMATS.values() if spec.present(identity)]
