"""Benchmarks; run with ``make bench`` (``python -m benchmarks``). Never part of the test suite."""
