"""What each writer's first recovery saw in the WAL, and which claims may therefore roll forward.

Bytes, ``_seo/recoveries/E`` (written once per epoch, create-if-absent, before that recovery
deletes anything)::

    v1
    {"epoch":5,"recoveredMs":1795313165250,"claims":[{"batchId":12,"epoch":4,"attempt":"9f2c41d0"}]}

Why: a writer W claims batch M by creating ``_seo/wal/M`` and then checks that it still holds
the lease. A writer frozen *between* its first fence check and its claim can wake up after a
successor S took over and ran recovery: its claim then lands after S listed the WAL, and S has
already deleted the attempt's staged data (rename) or data files (direct) as abandoned. W's
second fence check stops W itself, but the claim file stays, and a later recovery must not roll
it forward - that would publish files that are gone.

The rule: a claim by epoch ``e`` may roll forward only if the first recovery of a later epoch
saw it. That recovery's listing is taken after its epoch file exists, so every claim it does not
see was made after the takeover - by a writer whose own post-claim fence check fails, so none of
its steps ever ran, and whose data that recovery may have deleted. A claim that no later epoch
has recovered yet is still valid: nothing of its data was touched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..log.batch_log import parse_batch_file_name
from ..log.codec import RecordError, field
from ..log.record_file import encode_record, read_record
from ..storage.base import Storage
from ..table.layout import RECOVERIES_DIR
from .sequence import CommitSequence

VERSION = 1
HINT = (
    "A recovery record says which in-flight commits a writer found when it took over the table. "
    "Restore it from a backup, or delete it if no commit is pending (`seo status` shows them)."
)

ClaimKey = tuple[int, int, str]  # (manifest batch id, claiming epoch, attempt)


def claim_key(seq: CommitSequence) -> ClaimKey:
    return (seq.batch_id, seq.epoch, seq.attempt)


@dataclass(frozen=True)
class RecoveryRecord:
    epoch: int
    recovered_ms: int
    claims: frozenset[ClaimKey]

    def to_json(self) -> dict:
        return {
            "epoch": self.epoch,
            "recoveredMs": self.recovered_ms,
            "claims": [{"batchId": b, "epoch": e, "attempt": a} for b, e, a in sorted(self.claims)],
        }

    @classmethod
    def from_json(cls, obj: dict) -> "RecoveryRecord":
        claims = set()
        for item in field(obj, "claims", list):
            if not isinstance(item, dict):
                raise RecordError("field 'claims' must hold objects")
            claims.add((field(item, "batchId", int), field(item, "epoch", int), field(item, "attempt", str)))
        return cls(epoch=field(obj, "epoch", int), recovered_ms=field(obj, "recoveredMs", int), claims=frozenset(claims))


def record_first_recovery(storage: Storage, epoch: int, claims: list[CommitSequence]) -> None:
    """Write epoch ``epoch``'s record unless an earlier recovery of the same epoch did (the
    first listing is the one that decided what to delete)."""
    record = RecoveryRecord(epoch, int(time.time() * 1000), frozenset(claim_key(c) for c in claims))
    try:
        storage.put_if_absent(f"{RECOVERIES_DIR}/{epoch}", encode_record(record.to_json(), version=VERSION))
    except FileExistsError:
        pass


def _recorded_epochs(storage: Storage) -> list[int]:
    out = []
    for entry in storage.list_dir(RECOVERIES_DIR):
        parsed = parse_batch_file_name(entry.name)
        if parsed is not None and not parsed[1]:
            out.append(parsed[0])
    return sorted(out)


def claim_may_roll_forward(storage: Storage, seq: CommitSequence, recovered: list[int] | None = None) -> bool:
    """Whether the first recovery after ``seq``'s epoch saw the claim (see the module docstring).

    ``recovered`` is the sorted list of epochs with a record (listed once by the caller)."""
    epochs = _recorded_epochs(storage) if recovered is None else recovered
    later = [e for e in epochs if e > seq.epoch]
    if not later:
        return True
    record = read_record(storage, f"{RECOVERIES_DIR}/{later[0]}", RecoveryRecord.from_json, hint=HINT, version=VERSION)
    if record is None:  # pruned or removed meanwhile: the next one decides
        return claim_may_roll_forward(storage, seq, later[1:])
    return claim_key(seq) in record.claims


__all__ = ["RecoveryRecord", "claim_may_roll_forward", "record_first_recovery"]
