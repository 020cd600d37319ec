"""Compaction of small data files: planned, rewritten off the path, published by a compaction
batch of a table or a dataset group."""
