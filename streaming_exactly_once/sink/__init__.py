"""sink layer."""
