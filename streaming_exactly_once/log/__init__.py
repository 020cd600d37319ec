"""log layer."""
