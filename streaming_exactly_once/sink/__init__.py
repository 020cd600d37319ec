"""The sink layer: the Spark side of the commit protocol.

``ExactlyOnceSink`` writes one table; ``DatasetSink`` writes a group of tables (datasets, forks)
with quality gates (``Check``), one commit per batch.
"""

from .checks import Check
from .dataset_sink import DatasetSink
from .exactly_once_sink import ExactlyOnceSink
from .options import GroupOptions, SinkOptions
from .outputs import Output

__all__ = ["Check", "DatasetSink", "ExactlyOnceSink", "GroupOptions", "Output", "SinkOptions"]
