"""One writer of an Iceberg table in its own process, for the concurrency tests.

``python -m tests.iceberg.racer PROGRAM_JSON`` with ``{"root": ..., "tag": "A", "start_at": <epoch s>,
"batches": [0, 1, ...], "catalog": null | {"name": ..., "identifier": ..., "properties": {...}},
"barrier": {"dir": ..., "writers": 2, "batches": [0, 1]}}``: stages each batch's files under
names of its own (``tag``), waits for ``start_at`` (every writer starts at that instant), then runs
the batch's ``iceberg`` step as the commit sequence does - verify, else execute - retrying a step
that failed (an unknown outcome, a locked SQLite file), as a restarted sink would.

``barrier`` makes the race certain instead of likely: for those batches, each writer stops right
before its commit reaches the catalog (its snapshot built on the table it read) until every
writer is there, so all of them commit on the same base and all but one must lose.

``crash_at`` SIGKILLs the writer inside the step of its last batch: ``before-metadata`` (its
manifests written and synced, the metadata file not yet created) or ``before-hint`` (the metadata
file created, the version hint not yet replaced).

Prints one JSON line: the batches whose step found them done or executed, the races lost (a
commit the catalog or the create-if-absent refused), and the errors seen.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from streaming_exactly_once.errors import IcebergTableError
from streaming_exactly_once.iceberg import IcebergCatalogRef
from streaming_exactly_once.storage import open_storage
from tests.iceberg.helpers import batch_files, context, step


def arm_barrier(barrier: dict, tag: str, out: dict) -> None:
    """Wrap both catalogs' ``commit_table``: wait at the barrier, count lost races."""
    from streaming_exactly_once.iceberg import batch_property, catalogs
    from tests.iceberg.helpers import APP

    key = batch_property(APP)
    waited: set[int] = set()
    for cls in (catalogs.PathCatalog, catalogs.ArbitratedCatalog):
        real = cls.commit_table

        def commit_table(self, table, requirements, updates, _real=real):
            batch = next((int(u.updates[key]) for u in updates if key in getattr(u, "updates", {})), None)
            if batch in barrier["batches"] and batch not in waited:
                waited.add(batch)
                Path(barrier["dir"], f"{batch}-{tag}").touch()
                deadline = time.monotonic() + 60
                while len(list(Path(barrier["dir"]).glob(f"{batch}-*"))) < barrier["writers"] and time.monotonic() < deadline:
                    time.sleep(0.002)
            try:
                return _real(self, table, requirements, updates)
            except catalogs.LostRace:
                out["lost"].append(batch)
                raise

        cls.commit_table = commit_table


def arm_crash(where: str, batch: int) -> None:
    import os
    import signal

    from streaming_exactly_once.iceberg import fileio
    from streaming_exactly_once.storage.local import LocalStorage

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if where == "before-metadata":
        real_publish = fileio.StorageFileIO.publish

        def publish(self):
            paths = real_publish(self)
            if any(p.startswith("metadata/snap-") for p in paths) and STATE["batch"] == batch:
                die()
            return paths

        fileio.StorageFileIO.publish = publish
    elif where == "before-hint":
        real_write = LocalStorage.atomic_write

        def atomic_write(self, path, data):
            if path == "metadata/version-hint.text" and STATE["batch"] == batch:
                die()
            return real_write(self, path, data)

        LocalStorage.atomic_write = atomic_write


STATE = {"batch": -1}


def main(program: dict) -> dict:
    out: dict = {"tag": program["tag"], "found": [], "executed": [], "lost": [], "errors": []}
    if program.get("barrier"):
        arm_barrier(program["barrier"], program["tag"], out)
    if program.get("crash_at"):
        arm_crash(program["crash_at"], program["batches"][-1])
    storage = open_storage(program["root"])
    cat = program.get("catalog")
    ref = IcebergCatalogRef(cat["name"], cat["identifier"]) if cat else IcebergCatalogRef()
    ctx = context(storage, {cat["name"]: cat["properties"]} if cat else None)
    steps = []
    for b in program["batches"]:
        s = step(b, batch_files(storage, b, tag=program["tag"]), catalog=ref)
        s.info = {"queryId": program["tag"], "sparkBatchId": str(b)}
        steps.append(s)
    while time.time() < program["start_at"]:
        time.sleep(0.001)
    for s in steps:
        STATE["batch"] = s.batch_id
        for _ in range(50):
            try:
                if s.verify(ctx):
                    out["found"].append(s.batch_id)
                else:
                    s.execute(ctx)
                    out["executed"].append(s.batch_id)
                break
            except IcebergTableError as exc:
                out["errors"].append(f"{s.batch_id}: {str(exc)[:160]}")
                ctx.iceberg_targets.clear()
                time.sleep(0.05)
        else:
            out["gave_up"] = s.batch_id
            break
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
