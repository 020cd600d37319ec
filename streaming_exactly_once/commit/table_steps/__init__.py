"""Steps a batch adds to the protocol's own when its table asks for them: a schema change, a
Delta commit, an Iceberg snapshot, the audit ledger. Their kinds are registered by
``commit.protocol.sequence`` before any WAL entry is read."""
