"""``TableFormat``: what the commit protocol's neighbours ask of a table format's table.

A ``format="delta"`` or ``"iceberg"`` table commits every manifest batch once more, to the
format's own log, under an application id (``app_id``) whose newest batch the format keeps
(``applied_batch``). Upkeep and the readers then need the same few answers of every format:
what it holds, which files its retained versions read (``gc`` keeps them), its status for
``seo status``, and a named error when its table does not load. The format packages
implement this structurally (``delta.target.DeltaTarget``, ``iceberg.target.IcebergTarget``);
``formats.delta``/``formats.iceberg`` check that they do (mypy --strict). The commit itself
is one WAL step with a kind per format (``commit.table_steps.format_step``): the formats take
different settings, and their WAL bytes are fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..errors import ExactlyOnceError
from ..storage.base import Storage


class FormatFile(Protocol):
    """One data file a format's table reads: ``path`` relative to the table root."""

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def mtime_ms(self) -> int: ...

    @property
    def rows(self) -> int | None: ...


class TableFormat(Protocol):
    """One table's format: its log or metadata next to the manifest, as ``app_id`` writes it."""

    @property
    def app_id(self) -> str: ...

    @property
    def storage(self) -> Storage: ...

    def applied_batch(self, *, refresh: bool = True) -> int | None:
        """The newest manifest batch the format's table holds (None: none yet)."""
        ...

    def check_batch(self, schema_json: str | None, partition_by: Sequence[str], *, refresh: bool = True, table_schema: str | None = None) -> None:
        """Refuse, before anything is claimed, a batch the format's commit could not take."""
        ...

    def live_files(self) -> Sequence[FormatFile]:
        """The data files the format's current version reads."""
        ...

    def referenced_files(self) -> set[str]:
        """Every file (relative to the table) a retained version needs: ``gc`` keeps them."""
        ...

    def status(self) -> dict[str, Any]:
        """``seo status``: the format's version and the newest batch it holds."""
        ...

    def forget(self) -> None:
        """Drop what was read of the table: the next question reads it again."""
        ...

    def damaged(self, exc: BaseException) -> ExactlyOnceError:
        """The named error of a table that does not load because of ``exc``."""
        ...
