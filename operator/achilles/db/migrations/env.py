"""Alembic environment: runs migrations on the connection `achilles.db.migrate` hands in."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from achilles.db.schema import metadata

config = context.config
connection: Connection | None = config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reachable through the bare alembic CLI
    raise RuntimeError("run migrations with `achilles db upgrade`, which provides the connection")

context.configure(
    connection=connection,
    target_metadata=metadata,
    transaction_per_migration=False,
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
