"""table layer."""
