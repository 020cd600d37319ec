"""Crash-consistency torture suite (bounded in the test suite; ``make torture`` for long runs)."""
