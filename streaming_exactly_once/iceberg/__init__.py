"""The Iceberg layer: a table's Iceberg metadata, written and read with pyiceberg (no JVM).

Sits beside ``delta``: the manifest is the table's publication for Spark's file-source readers
(``_spark_metadata``), the Iceberg metadata its publication for every Iceberg reader. Both name
the same Parquet files; the commit layer publishes a batch in one, then the other
(``commit.iceberg_step``). Nothing here imports ``pyiceberg`` at import time: ``target`` and
``files`` import it inside their calls, after ``engine.require()``; the other modules
(``fileio``, ``catalogs``, ``schema``, ``datafiles``, ``history``) import it at the top and are
only imported from there.
"""

from .files import IcebergFile
from .settings import IcebergCatalogRef, IcebergSettings, app_id, batch_property
from .target import IcebergTarget

__all__ = ["IcebergCatalogRef", "IcebergFile", "IcebergSettings", "IcebergTarget", "app_id", "batch_property"]
