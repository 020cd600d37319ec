"""The Delta layer: a table's ``_delta_log``, written and read with delta-rs (``deltalake``).

Sits beside ``manifest``: the manifest is the table's publication for Spark's file-source
readers (``_spark_metadata``), the Delta log its publication for every Delta reader. Both name
the same Parquet files; the commit layer publishes a batch in one, then the other
(``commit.table_steps.format_step``). Nothing here imports ``deltalake`` at import time.
"""

from .files import DeltaFile
from .target import DeltaSettings, DeltaTarget, app_id

__all__ = ["DeltaFile", "DeltaSettings", "DeltaTarget", "app_id"]
