"""What names an Iceberg target in the WAL and in the table: the app id, the batch property, the
catalog reference and the table properties a first batch creates the table with (plain values,
no pyiceberg: the commit step's record declares them)."""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from ..log.record_fields import json_field

APP_ID_PREFIX = "streaming-exactly-once:"
#: The table property holding the newest batch of an app: ``seo.batch-id.<app id>``.
BATCH_PROPERTY_PREFIX = "seo.batch-id."


def app_id(table_id: str) -> str:
    """The application id of the table with this identity (``table.identity``)."""
    return APP_ID_PREFIX + table_id


def batch_property(app: str) -> str:
    return BATCH_PROPERTY_PREFIX + app


@dataclass(frozen=True)
class IcebergCatalogRef:
    """Which catalog records the table: none (``name`` None: the table's own metadata files, found
    by path), or a pyiceberg catalog by name whose properties are resolved at run time - from the
    ``catalog_properties`` the sink was given, else pyiceberg's own configuration
    (``PYICEBERG_CATALOG__<NAME>__URI``, ``~/.pyiceberg.yaml``). Never holds secrets."""

    name: str | None = dc_field(default=None, metadata=json_field("name", str, optional=True, omit_default=True))
    #: the table in that catalog, ``namespace.table``
    identifier: str | None = dc_field(default=None, metadata=json_field("identifier", str, optional=True, omit_default=True))


@dataclass(frozen=True)
class IcebergSettings:
    """Table properties set when the first batch creates the table (plain values, see the sink)."""

    #: commit.manifest.min-count-to-merge: manifests merge once this many pile up, so that a
    #: snapshot's manifest list stays short however long the history
    min_count_to_merge: int = dc_field(default=100, metadata=json_field("minCountToMerge", int, optional=True))
    #: write.metadata.previous-versions-max: metadata files kept besides the current one (older
    #: ones are deleted after each commit: each file holds the whole snapshot list)
    previous_versions: int = dc_field(default=100, metadata=json_field("previousVersions", int, optional=True))
    #: the sink's snapshot expiry: each commit keeps this many newest snapshots and expires the
    #: older ones (of any writer; branch and tag heads stay) in the same metadata version; None:
    #: no expiry
    snapshots_to_keep: int | None = dc_field(default=None, metadata=json_field("snapshotsToKeep", int, optional=True, omit_default=True))

    def table_properties(self) -> dict[str, str]:
        return {
            "format-version": "2",
            "commit.manifest-merge.enabled": "true",
            "commit.manifest.min-count-to-merge": str(self.min_count_to_merge),
            "write.metadata.previous-versions-max": str(self.previous_versions),
            "write.metadata.delete-after-commit.enabled": "true",
            "write.format.default": "parquet",
        }
