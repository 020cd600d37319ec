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
from typing import Any, cast

from ..errors import CatalogNotConfiguredError, DeltaTableError, ExactlyOnceError, IcebergTableError, MissingDependencyError
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
    #: the app id the table commits to the format under, by its identity
    app_id: Callable[[TableIdentity], str | None]
    #: what ``seo status`` shows of the format beside its ``TableFormat.status`` (e.g. a catalog)
    labels: Callable[[TableIdentity], dict[str, str]] = lambda identity: {}

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


def _delta_app(identity: TableIdentity) -> str | None:
    return identity.delta_app_id


def _iceberg_app(identity: TableIdentity) -> str | None:
    return identity.iceberg.app_id if identity.iceberg is not None else None


def _iceberg_labels(identity: TableIdentity) -> dict[str, str]:
    catalog = identity.iceberg.catalog if identity.iceberg is not None else None
    return {"catalog": f"{catalog.name}:{catalog.identifier}"} if catalog is not None and catalog.name is not None else {}


#: In commit order: a ``format="delta"`` table with ``iceberg=`` commits to Delta first.
FORMATS: dict[str, FormatSpec] = {
    "delta": FormatSpec("delta", "delta", "streaming_exactly_once.formats.delta:open_table", DeltaTableError, _is_delta, "_delta_log", _delta_app),
    "iceberg": FormatSpec(
        "iceberg",
        "iceberg",
        "streaming_exactly_once.formats.iceberg:open_table",
        IcebergTableError,
        _is_iceberg,
        "metadata",
        _iceberg_app,
        _iceberg_labels,
    ),
}


def format_status(spec: FormatSpec, storage: Storage, identity: TableIdentity) -> dict[str, Any]:
    """``seo status`` of one format of the table: its ``TableFormat.status``, or the error that
    stops it - a missing extra or catalog configuration says this environment cannot read it
    (the table is not broken)."""
    labels = spec.labels(identity)
    try:
        return {**spec.open(storage, identity).status(), **labels}
    except MissingDependencyError as exc:
        return {"appId": spec.app_id(identity), **labels, "error": str(exc), "missingExtra": exc.extra}
    except CatalogNotConfiguredError as exc:
        return {"appId": spec.app_id(identity), **labels, "error": str(exc), "missingCatalog": exc.catalog}
    except ExactlyOnceError as exc:
        return {"appId": spec.app_id(identity), **labels, "error": str(exc)}


def formats_of(identity: TableIdentity) -> list[FormatSpec]:
    """The formats a table is (also) committed to, in commit order (none for a plain table)."""
    return [spec for spec in FORMATS.values() if spec.present(identity)]
