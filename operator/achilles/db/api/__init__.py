"""What the HTTP API keeps in the database: idempotency keys and the owners' event log."""
