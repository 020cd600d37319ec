"""Which table configurations the torture matrix covers, and what each one's commit reaches.

A combination is staging mode x manifest location x format x single table or dataset group x
storage. Only what the library supports is in ``COMBOS``; ``UNSUPPORTED`` says why the rest is
not (the sinks refuse it at construction):

* ``spark_manifest=False`` needs ``format="delta"``: a plain table's readers have nothing else
  to read (``SinkOptions.validate_delta``).
* a dataset group stages every batch under its root and renames files into its tables: no
  ``direct`` mode, and its tables always publish ``_spark_metadata`` (``DatasetSink``).
* ``format="iceberg"``: single tables on local disk (the path-based default catalog), alone and
  with Delta (``format=["delta", "iceberg"]``: a kill between the two steps is
  ``before-iceberg``) - the slice's time budget; a dataset group's Iceberg tables are killed in
  ``tests/iceberg/test_iceberg_table.py``, S3 is the Iceberg layer's own store tests.

Each combination is written by ``tests.commit.processes`` writers (``program`` gives their
options); ``boundaries`` are the commit boundaries (``testing.faults``) its commit reaches, and
``wrong_configs`` the restarts its table must refuse with ``ConfigError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from streaming_exactly_once.testing.faults import BOUNDARIES, COMPACTION_ONLY, DELTA_ONLY, GROUP_ONLY, ICEBERG_ONLY

TABLE_RENAME = [b for b in BOUNDARIES if b not in ("after-cleanup", *GROUP_ONLY, *DELTA_ONLY, *ICEBERG_ONLY, *COMPACTION_ONLY)]
TABLE_DIRECT = [b for b in BOUNDARIES if b not in ("mid-move", "after-move", *GROUP_ONLY, *DELTA_ONLY, *ICEBERG_ONLY, *COMPACTION_ONLY)]
#: a group's Delta step is the members' (after-members follows it); after-delta is the same instant
GROUP = [b for b in BOUNDARIES if b not in ("after-manifest", "after-cleanup", *DELTA_ONLY, *ICEBERG_ONLY, *COMPACTION_ONLY)]
#: what a compacted table's writers rewrite: every compaction batch rewrites the files before it
COMPACTION = {"target_size": 1 << 20, "min_files": 3, "min_age_ms": 0, "max_bytes": 1 << 20}
#: a claimed batch: the frozen writer may finish it after the takeover (``zombie_run.CLAIMED``)
CLAIMED = {
    "after-wal",
    "mid-move",
    "after-move",
    "after-manifest",
    "after-delta",
    "after-sources",
    "after-commit",
    "after-cleanup",
    "after-records-sync",
    "after-wal-delete",
    "mid-members",
    "after-members",
}
CLAIMED |= set(ICEBERG_ONLY)
#: the rewrite is written in the background: the writer's own thread may be past its claim of
#: the next batch when the rewrite's thread freezes the process there
CLAIMED |= set(COMPACTION_ONLY)
#: boundaries where a zombie-successor run is most likely to break (the bounded slice's picks)
LIKELY = (
    "after-rewrite",
    "after-wal",
    "mid-move",
    "after-manifest",
    "after-delta",
    "before-iceberg",
    "before-iceberg-publish",
    "mid-iceberg",
    "after-commit",
    "after-records-sync",
    "mid-members",
    "after-members",
)

TABLES = ("t0", "t1")  # a group's tables


@dataclass(frozen=True)
class Combo:
    staging: str  # rename | direct
    manifest: str  # spark (_spark_metadata) | private (_seo/manifest)
    delta: bool
    group: bool
    store: str  # local | s3
    interval: int = 3  # compact_interval: small, so that every few batches compact
    iceberg: bool = False  # format="iceberg" (with ``delta``: both formats, one WAL sequence)
    compaction: bool = False  # compaction batches rewrite the small files before them (``COMPACTION``)

    @property
    def name(self) -> str:
        shape = "group" if self.group else "table"
        fmt = "+".join([*(["delta"] if self.delta else []), *(["iceberg"] if self.iceberg else [])]) or "plain"
        return f"{shape}-{fmt}-{self.manifest}-{self.staging}-{self.store}{'-compacted' if self.compaction else ''}"

    @property
    def boundaries(self) -> list[str]:
        if self.group:
            return list(GROUP) + (list(COMPACTION_ONLY) if self.compaction else [])
        base = TABLE_RENAME if self.staging == "rename" else TABLE_DIRECT
        if self.compaction:  # a direct-mode compaction batch moves its new files into place
            base = base + list(COMPACTION_ONLY) + (["mid-move", "after-move"] if self.staging == "direct" else [])
        return base + (["after-delta"] if self.delta else []) + (list(ICEBERG_ONLY) if self.iceberg else [])

    @property
    def compaction_batch_only(self) -> tuple[str, ...]:
        """Boundaries only this combination's compaction batches reach (their rewrite, and in
        ``direct`` mode the move of its new files)."""
        if not self.compaction:
            return ()
        return (*COMPACTION_ONLY, *(("mid-move", "after-move") if self.staging == "direct" else ()))

    @property
    def tables(self) -> list[str]:
        """The tables under the root ("" is the root itself)."""
        return list(TABLES) if self.group else [""]

    @property
    def manifest_dir(self) -> str:
        """Where a table's readers find its manifest, relative to the table."""
        return "_spark_metadata" if self.manifest == "spark" else "_seo/manifest"

    def manifest_dirs(self) -> list[str]:
        """Every manifest, relative to the root."""
        return [f"{t}/{self.manifest_dir}" if t else self.manifest_dir for t in self.tables]

    def program(
        self,
        name: str,
        root: str,
        steps: list[dict],
        *,
        storage_options: dict | None,
        lease_ms: int,
        options: dict | None = None,
        delta: bool | None = None,
        iceberg: bool | None = None,
    ) -> dict:
        """A ``tests.commit.processes`` program writing this combination (``options`` and ``delta``
        override it: a restart with another configuration)."""
        opts = {
            "lease_timeout_ms": lease_ms,
            "compact_interval": self.interval,
            "min_batches_to_retain": 2,
            "cleanup_delay_ms": 0,
            "spark_manifest": self.manifest == "spark",
            **({"compaction": COMPACTION} if self.compaction else {}),
            **(options or {}),
        }
        use_delta = self.delta if delta is None else delta
        use_iceberg = self.iceberg if iceberg is None else iceberg
        if use_iceberg:
            opts.setdefault("partition_by", ["p"])
        return {
            "name": name,
            "root": root,
            "group": list(TABLES) if self.group else None,
            "steps": steps,
            "storage_options": storage_options,
            "options": opts,
            "delta": {"checkpoint_interval": 4} if use_delta else None,
            "iceberg": {"snapshots_to_keep": 4} if use_iceberg else None,
        }

    def wrong_configs(self) -> dict[str, dict]:
        """Restarts the table must refuse (``ConfigError``) without changing anything: name ->
        ``program`` overrides."""
        other = {"compact_interval": self.interval + 2}
        if self.group:
            return {"another compact_interval": {"options": other}}
        out = {"another compact_interval": {"options": other}}
        if self.iceberg:
            out["without format=iceberg"] = {"iceberg": False, "delta": self.delta or None, "options": {"partition_by": ["p"]}}
            out["with the other table format too" if not self.delta else "without format=delta"] = {
                "delta": not self.delta,
                "options": {"partition_by": ["p"]},
            }
            out["another partitioning"] = {"options": {"partition_by": ["q"]}}
        elif self.delta:
            out["spark_manifest flipped"] = {"options": {"spark_manifest": self.manifest != "spark"}}
            out["without format=delta"] = {"delta": False, "options": {"spark_manifest": True}}
            out["another partitioning"] = {"options": {"partition_by": ["q"]}}
        else:
            out["as a private-manifest Delta table"] = {"delta": True, "options": {"spark_manifest": False, "partition_by": []}}
            out["as a Delta table"] = {"delta": True, "options": {"partition_by": []}}
            out["another partitioning"] = {"options": {"partition_by": ["p"]}}
        return out


def _supported() -> list[Combo]:
    out = []
    for store in ("local", "s3"):
        for staging in ("rename", "direct"):
            # compaction on for two local tables (a plain one's direct-mode moves, a Delta one's rewrite
            # commit) and a local group of Delta tables
            local = store == "local"
            out.append(Combo(staging, "spark", False, False, store, compaction=local and staging == "direct"))
            out.append(Combo(staging, "spark", True, False, store))
            out.append(Combo(staging, "private", True, False, store, compaction=local and staging == "rename"))
        out.append(Combo("rename", "spark", False, True, store, interval=4))  # a group with a non-default interval
        out.append(Combo("rename", "spark", True, True, store, interval=4, compaction=local))  # each table compacts on its own
    out.append(Combo("rename", "spark", False, False, "local", iceberg=True, compaction=True))  # a replace snapshot per rewrite
    out.append(Combo("direct", "spark", True, False, "local", iceberg=True))  # both formats: one WAL sequence, two steps
    return out


COMBOS = _supported()
BY_NAME = {c.name: c for c in COMBOS}

UNSUPPORTED = {
    "table-plain-private-*": "spark_manifest=False is a format='delta' option: a plain table's readers need _spark_metadata",
    "group-*-*-direct-*": "a dataset group stages under its root and renames into its tables: staging_mode='direct' is refused",
    "group-*-private-*": "a dataset group's tables always publish _spark_metadata: spark_manifest=False is refused",
}
