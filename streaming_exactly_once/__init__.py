"""streaming-exactly-once: exactly-once file output for PySpark Structured Streaming.

Public API (imported lazily so that ``import streaming_exactly_once`` works without pyspark):

* ``ExactlyOnceSink`` - the ``foreachBatch`` sink of one table (needs the ``[spark]`` extra);
* ``DatasetSink``, ``Output``, ``Check`` - one query into many tables (datasets, forks), with
  quality gates and per-dataset watermarks, one commit per batch;
* ``read`` - manifest-aware readers for Spark, pyarrow, pandas, polars and DuckDB;
* ``errors`` - the exception tree rooted at ``ExactlyOnceError``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import ExactlyOnceError

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and IDEs
    from . import readers as read
    from .sink import Check, DatasetSink, ExactlyOnceSink, GroupOptions, Output, SinkOptions
    from .sink.progress import SinkProgressListener
    from .storage import open_storage

__version__ = "0.1.0"

_LAZY = {
    "ExactlyOnceSink": ("streaming_exactly_once.sink", "ExactlyOnceSink"),
    "SinkOptions": ("streaming_exactly_once.sink", "SinkOptions"),
    "GroupOptions": ("streaming_exactly_once.sink", "GroupOptions"),
    "DatasetSink": ("streaming_exactly_once.sink", "DatasetSink"),
    "Output": ("streaming_exactly_once.sink", "Output"),
    "Check": ("streaming_exactly_once.sink", "Check"),
    "SinkProgressListener": ("streaming_exactly_once.sink.progress", "SinkProgressListener"),
    "read": ("streaming_exactly_once.readers", None),
    "open_storage": ("streaming_exactly_once.storage", "open_storage"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'streaming_exactly_once' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    if module_name.startswith("streaming_exactly_once.sink"):
        from .extras import require

        require("spark")
    module = import_module(module_name)
    return module if attr is None else getattr(module, attr)


__all__ = [
    "ExactlyOnceError",
    "ExactlyOnceSink",
    "DatasetSink",
    "Output",
    "Check",
    "SinkOptions",
    "GroupOptions",
    "SinkProgressListener",
    "read",
    "open_storage",
    "__version__",
]
