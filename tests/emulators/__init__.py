"""Real storage servers (Azurite, fake-gcs-server) for the storage tests; see ``servers.py``."""
