"""Where everything lives inside a table directory.

::

    <table>/
      _spark_metadata/0 1 ... 9.compact ...   manifest, Spark's format (manifest.manifest_log)
      _seo/                                   the sink's own area; '_' hides it from every reader
        table                                 identity: table id, root URI, compact interval (table.identity)
        offsets/M[.compact]                   intent: which query batch manifest batch M is (table.offsets_log)
        commits/M[.compact]                   what manifest batch M committed (table.commits_log)
        sources/M[.compact]                   input files of manifest batch M (table.sources_log)
        schema/M                              the table schema from batch M on, one per change (table.schema_log)
        wal/M                                 pending commit sequence of batch M (commit.protocol.wal)
        epochs/E                              writer epoch E: the fencing token (commit.protocol.lease)
        heartbeats/E                          liveness of writer E (commit.protocol.lease)
        verdicts/M-<attempt>                  rolled forward or aborted: an abandoned attempt's one verdict (commit.protocol.attempt_verdict)
        ledger/M                              what batch M read, wrote and published, for `seo audit` (table.ledger)
        audit                                 how far `seo audit` got and its verdict (table.audit_mark)
        refused                               the last batch the sink refused, and why: a note for people (table.refusal)
        staging/M-<attempt>-e<E>/             data of an uncommitted attempt of writer E (sink)
        retired/M                             entries compaction batch M left out of the listing (manifest.retired)
        probe/<uuid>                          short-lived: the object-store exclusivity check (storage)
      k=v/part-....parquet                    data files

``M`` is the manifest batch id, the sink's own gap-free sequence; it is *not* Spark's batch id
(the commits log maps (query id, Spark batch id) to ``M``).
"""

from __future__ import annotations

SEO_DIR = "_seo"
TABLE_FILE = f"{SEO_DIR}/table"
OFFSETS_DIR = f"{SEO_DIR}/offsets"
COMMITS_DIR = f"{SEO_DIR}/commits"
SOURCES_DIR = f"{SEO_DIR}/sources"
WAL_DIR = f"{SEO_DIR}/wal"
EPOCHS_DIR = f"{SEO_DIR}/epochs"
HEARTBEATS_DIR = f"{SEO_DIR}/heartbeats"
VERDICTS_DIR = f"{SEO_DIR}/verdicts"
#: Written by earlier builds (first-recovery records, replaced by attempt verdicts); still
#: pruned with the epochs, never read.
RECOVERIES_DIR = f"{SEO_DIR}/recoveries"
#: Files kept per epoch besides ``epochs/E`` itself, pruned with it (``commit.protocol.lease``).
EPOCH_SIDE_DIRS = (HEARTBEATS_DIR, RECOVERIES_DIR)
STAGING_DIR = f"{SEO_DIR}/staging"
LEDGER_DIR = f"{SEO_DIR}/ledger"
AUDIT_FILE = f"{SEO_DIR}/audit"
PROBE_DIR = f"{SEO_DIR}/probe"

HIDDEN_PREFIXES = ("_", ".")


def staging_dir(batch_id: int, attempt: str, epoch: int) -> str:
    """``_seo/staging/12-3fa9c1d2-e5``: the writer's epoch in the name lets a recovery tell a
    newer writer's attempt (never its to touch) from an abandoned one without reading anything."""
    return f"{STAGING_DIR}/{batch_id}-{attempt}-e{epoch}"


def staging_dir_holding(path: str) -> str | None:
    """The staging directory (``_seo/staging/<name>``) a path lies in; None if it is elsewhere."""
    parts = path.split("/")
    return "/".join(parts[:3]) if len(parts) > 3 and path.startswith(STAGING_DIR + "/") else None


def parse_staging_name(name: str) -> tuple[int, str, int | None] | None:
    """``12-3fa9c1d2-e5`` -> (12, ``3fa9c1d2``, 5); ``12-3fa9c1d2`` (earlier builds,
    no epoch) -> (12, ``3fa9c1d2``, None); anything else -> None."""
    head, sep, rest = name.partition("-")
    if not sep or not head.isdigit() or not rest:
        return None
    attempt, sep, epoch = rest.partition("-e")
    if not attempt:
        return None
    if not sep:
        return int(head), attempt, None
    if not epoch.isdigit():
        return None
    return int(head), attempt, int(epoch)


def is_hidden(relative_path: str) -> bool:
    """Whether any component starts with ``_`` or ``.`` (Spark and Arrow skip those)."""
    return any(part.startswith(HIDDEN_PREFIXES) for part in relative_path.split("/") if part)
