"""The seam through which a log publishes a compact file built ahead of its batch
(``commit.background.compaction_preparation`` builds them; ``CompactibleLog.add`` asks)."""

from __future__ import annotations

from typing import Protocol


class Preparation(Protocol):
    """A compact file built ahead of its batch: ``add`` publishes it instead of building one."""

    def holds(self, compact_id: int) -> bool:
        """Whether a file for compaction batch ``compact_id`` is under way."""
        ...

    def publish(self, compact_id: int, own_tail: bytes, *, context: str) -> bool | None:
        """Publish it as compact file ``compact_id`` with the batch's own records (``own_tail``)
        appended: True, or False if the file existed; None: build it from the logs after all."""
        ...


class _NotPrepared:
    def holds(self, compact_id: int) -> bool:
        return False

    def publish(self, compact_id: int, own_tail: bytes, *, context: str) -> bool | None:
        return None


NOT_PREPARED: Preparation = _NotPrepared()
