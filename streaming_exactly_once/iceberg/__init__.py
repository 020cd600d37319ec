"""The Iceberg layer: a table's Iceberg metadata, written and read with pyiceberg (no JVM).

Sits beside ``delta``: the manifest is the table's publication for Spark's file-source readers
(``_spark_metadata``), the Iceberg metadata its publication for every Iceberg reader. Both name
the same Parquet files; the commit layer publishes a batch in one, then the other
(``commit.table_steps.format_step``). Nothing here imports ``pyiceberg`` at import time: ``target`` and
``files`` import it inside their calls, after ``engine.require()``; the other modules
(``fileio``, ``catalogs``, ``schema``, ``datafiles``, ``history``) import it at the top and are
only imported from there.

On disk (format version 2 Iceberg metadata, as pyiceberg writes it; our additions in bold; byte
for byte, with the WAL step and the identity, in ``docs/design/iceberg-format.md``)::

    <table>/metadata/v<N>.metadata.json     N = 1, 2, ... one per commit, created create-if-absent
                                            (the path-based default; a catalog names its own files
                                            <5-digit version>-<uuid>.metadata.json and points at one)
    <table>/metadata/version-hint.text      N in ASCII decimal, no newline (as Spark's Hadoop catalog)
    <table>/metadata/snap-<id>-0-<uuid>.avro   a snapshot's manifest list
    <table>/metadata/<uuid>-m<k>.avro       manifests

* **table property** ``"seo.batch-id.streaming-exactly-once:<table id>": "<M>"`` - the newest
  manifest batch in the table (decimal), set by the commit that adds batch M's snapshot;
* **snapshot summary** ``"seo.app-id": "streaming-exactly-once:<table id>"``, ``"seo.batch-id":
  "<M>"`` and the step's ``info`` as ``"seo.<key>"`` (``seo.queryId``, ``seo.sparkBatchId``);
* table properties of a table the first batch creates: ``format-version`` 2,
  ``commit.manifest-merge.enabled=true``, ``commit.manifest.min-count-to-merge`` (100),
  ``write.metadata.previous-versions-max`` (100), ``write.metadata.delete-after-commit.enabled=true``,
  ``write.format.default=parquet``, and ``schema.name-mapping.default`` (Spark's Parquet files
  carry no field ids: readers resolve their columns by name);
* data file locations are ``<table location>/<path relative to the table root>``, the location
  being the plain path on local disk and the table's URI elsewhere; partition values are those
  of the identity partition spec, from the files' ``column=value`` directories.
"""

from .files import IcebergFile
from .settings import IcebergCatalogRef, IcebergSettings, app_id, batch_property
from .target import IcebergTarget

__all__ = ["IcebergCatalogRef", "IcebergFile", "IcebergSettings", "IcebergTarget", "app_id", "batch_property"]
