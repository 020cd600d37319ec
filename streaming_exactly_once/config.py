"""Configuration files and environment overrides, read at the edges (CLI, jobs) only."""
