"""The write-ahead log of commit sequences: ``_seo/wal/M``, one file per in-flight batch.

Gobblin's CommitSequenceStore, keyed by the manifest batch id. ``put`` is a create-if-absent
write: it is also how a writer *claims* manifest batch M - of two writers that both think M is
next, one gets ``FileExistsError``. An entry is deleted once every step of it is done, so in
steady state the directory is empty and listing it at start-up costs nothing.
"""

from __future__ import annotations

from ..log.batch_log import parse_batch_file_name
from ..storage.base import Storage
from ..table.layout import WAL_DIR
from .sequence import CommitSequence


class CommitSequenceStore:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def path(self, batch_id: int) -> str:
        return f"{WAL_DIR}/{batch_id}"

    def put(self, sequence: CommitSequence) -> None:
        self.storage.put_if_absent(self.path(sequence.batch_id), sequence.to_bytes())

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

    def delete(self, batch_id: int) -> None:
        self.storage.delete(self.path(batch_id))
