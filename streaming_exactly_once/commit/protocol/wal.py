"""The write-ahead log of commit sequences: ``_seo/wal/M``, one file per in-flight batch.

Gobblin's CommitSequenceStore, keyed by the manifest batch id. ``put`` is a create-if-absent
write: it is also how a writer *claims* manifest batch M - of two writers that both think M is
next, one gets ``FileExistsError``. An entry is deleted once every step of it is done, so in
steady state the directory is empty and listing it at start-up costs nothing.
"""

from __future__ import annotations

import logging

from ...errors import ExactlyOnceError
from ...log.batch_log import parse_batch_file_name
from ...storage.base import Storage
from ...table.layout import WAL_DIR
from .lease import fenced_cause
from .sequence import CommitSequence

log = logging.getLogger("streaming_exactly_once.commit")


class CommitSequenceStore:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def path(self, batch_id: int) -> str:
        return f"{WAL_DIR}/{batch_id}"

    def put(self, sequence: CommitSequence) -> None:
        try:
            self.storage.put_if_absent(self.path(sequence.batch_id), sequence.to_bytes())
        except FileNotFoundError as exc:
            fenced = fenced_cause(self.storage, sequence.epoch, "claim")  # its temp file removed by a successor
            if fenced is not None:
                raise fenced from exc
            raise

    def get(self, batch_id: int) -> CommitSequence | None:
        try:
            data = self.storage.read_bytes(self.path(batch_id))
        except FileNotFoundError:
            return None
        return CommitSequence.from_bytes(data, path=self.storage.uri(self.path(batch_id)), batch_id=batch_id)

    def pending(self) -> list[int]:
        ids = []
        for entry in self.storage.list_dir(WAL_DIR):
            parsed = parse_batch_file_name(entry.name)
            if parsed is not None and not parsed[1]:
                ids.append(parsed[0])
        return sorted(ids)

    def delete_completed(self, batch_id: int) -> None:
        """The writer's own entry once every step ran: manifest batch M is published, so no
        other writer can claim M again and no check is needed."""
        self.storage.delete(self.path(batch_id))

    def delete(self, batch_id: int, *, attempt: str | None = None, raw: bytes | None = None) -> bool:
        """Delete WAL entry M only if it still is the claim the caller judged: the claim of
        ``attempt`` or, for an entry that could not be read, exactly the bytes ``raw``.

        Why: batch numbers are reused. A claim that is discarded leaves M free, and the next
        writer re-runs the batch under the same number. A process frozen between its decision
        and this delete (its lease long expired, its fence checked before the nap) must not
        remove the newer writer's claim - that would strand the newer batch (its staging taken
        for an abandoned attempt, its records missing). Returns whether it deleted."""
        path = self.path(batch_id)
        try:
            data = self.storage.read_bytes(path)
        except FileNotFoundError:
            return False
        if raw is not None:
            same = data == raw
        else:
            try:
                same = CommitSequence.from_bytes(data, path=self.storage.uri(path), batch_id=batch_id).attempt == attempt
            except ExactlyOnceError:
                same = False
        if not same:
            log.warning(
                "WAL entry %s is no longer the claim of attempt %s: another writer claimed the batch; left alone", self.storage.uri(path), attempt
            )
            return False
        self.storage.delete(path)
        return True
