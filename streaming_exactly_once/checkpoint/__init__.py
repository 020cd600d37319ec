"""Readers of Spark's own streaming checkpoint formats (metadata, offsets, commits, sources)."""

from .reader import InputFile, SparkCheckpoint

__all__ = ["InputFile", "SparkCheckpoint"]
