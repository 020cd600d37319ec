"""The sink layer: ``ExactlyOnceSink``, the Spark side of the commit protocol."""

from .exactly_once_sink import ExactlyOnceSink
from .options import SinkOptions

__all__ = ["ExactlyOnceSink", "SinkOptions"]
