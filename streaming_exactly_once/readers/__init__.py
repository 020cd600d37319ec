"""readers layer."""
