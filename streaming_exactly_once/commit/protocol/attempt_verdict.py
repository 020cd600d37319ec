"""One verdict per abandoned attempt: rolled forward or aborted, decided once by a create-if-absent.

Bytes, ``_seo/verdicts/<batch>-<attempt>`` (``12-9f2c41d0``: the attempt's staging name without
its epoch suffix)::

    v1
    {"verdict":"abort","epoch":5,"writtenMs":1795313165250}

``verdict`` is ``commit`` (a recovering writer rolls the attempt's WAL claim forward) or
``abort`` (a recovering writer, ``seo gc`` or ``seo recover`` deletes the attempt's staged data
or data files); ``epoch`` is the lease epoch of whoever decided.

Why: an attempt of writer W (epoch ``e``) can be judged by two parties that do not see the same
thing. A successor S lists the WAL after it took the lease; if W was frozen between its first
fence check and its WAL claim, the claim lands *after* S's listing, S takes the attempt for one
that never claimed and deletes its data, and W's own post-claim fence check stops W but leaves
the claim behind. A later recovery that finds the claim must not publish it. Conversely a
recoverer frozen between its listing and its deletions (its own fence check passed) wakes up
with a stale view: a newer writer may have rolled the same claim forward meanwhile, and the
frozen recoverer must not delete the data of a published batch.

Whichever party acts first on an attempt of an *earlier* epoch than its own writes its verdict
here, before it changes anything, and the file's exclusive create makes the first verdict the
only one: a roll-forward that finds ``abort`` discards the claim instead (the batch was never
published: publishing requires ``commit``), an abort that finds ``commit`` leaves the attempt
alone. A writer's own attempts (same epoch) need no verdict: nobody with a lower epoch may abort
them (the staging name carries the epoch, ``table.layout.staging_dir``) and nobody with a higher
epoch can act without having seen the claim (the post-claim fence check). So the steady state
writes nothing here; a verdict costs one create per abandoned attempt, at recovery.

Verdicts are never deleted: a writer frozen for a week may still wake up and claim, and its
attempt's verdict is what keeps that claim from publishing files that are gone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field as dc_field
from typing import Any, Literal

from ...log.record_fields import decode, encode, json_field, one_of
from ...log.record_file import encode_record, read_record
from ...storage.base import Storage
from ...table.layout import VERDICTS_DIR

VERSION = 1
COMMIT: Literal["commit"] = "commit"
ABORT: Literal["abort"] = "abort"
HINT = (
    "An attempt verdict records whether an abandoned commit attempt was rolled forward or aborted. "
    "Restore it from a backup; if it is lost, delete the file and run `seo recover <table>`: the attempt "
    "is judged again, rolled forward only if every data file it names is there (otherwise the error "
    "names the `seo recover --discard-wal` command that drops it)."
)


@dataclass(frozen=True)
class AttemptVerdict:
    verdict: str = dc_field(metadata=json_field("verdict", str, check=one_of(COMMIT, ABORT)))
    epoch: int = dc_field(metadata=json_field("epoch", int))
    written_ms: int = dc_field(metadata=json_field("writtenMs", int))

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> AttemptVerdict:
        return decode(cls, obj)


def verdict_path(batch_id: int, attempt: str) -> str:
    return f"{VERDICTS_DIR}/{batch_id}-{attempt}"


def decide(storage: Storage, batch_id: int, attempt: str, verdict: str, *, epoch: int) -> str:
    """Propose ``verdict`` for the attempt and return the verdict that holds: ours if we were
    first, else the one already written (read back; a torn or foreign file raises
    ``LogCorruptError`` naming it rather than deciding blind)."""
    path = verdict_path(batch_id, attempt)
    record = AttemptVerdict(verdict, epoch, int(time.time() * 1000))
    try:
        storage.put_if_absent(path, encode_record(record.to_json(), version=VERSION))
        return verdict
    except FileExistsError:
        pass
    existing = read_record(storage, path, AttemptVerdict.from_json, hint=HINT, version=VERSION)
    if existing is None:  # cannot happen (never deleted); decide again rather than guess
        return decide(storage, batch_id, attempt, verdict, epoch=epoch)
    return existing.verdict


def read_verdict(storage: Storage, batch_id: int, attempt: str) -> AttemptVerdict | None:
    return read_record(storage, verdict_path(batch_id, attempt), AttemptVerdict.from_json, hint=HINT, version=VERSION)


def overrule(storage: Storage, batch_id: int, attempt: str, verdict: str, *, epoch: int) -> None:
    """Replace a verdict: only for a person's repair (``seo recover --discard-wal``) of an attempt
    whose earlier verdict came from an *older* epoch that can no longer act on it (the caller
    holds a newer lease and checks its fence after this write, before it deletes anything)."""
    record = AttemptVerdict(verdict, epoch, int(time.time() * 1000))
    storage.atomic_write(verdict_path(batch_id, attempt), encode_record(record.to_json(), version=VERSION))


__all__ = ["ABORT", "COMMIT", "AttemptVerdict", "decide", "overrule", "read_verdict", "verdict_path"]
