"""The database schema's migrations, as `achilles db` applies them (the chart's migration
Job runs the same command). Each step runs under the migration lock (`db.migrate`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from achilles.db import migrate
from achilles.db.database import Database


@dataclass(frozen=True)
class SchemaRevisions:
    before: frozenset[str]
    after: frozenset[str]


def upgrade(database: Database, revision: str = "heads") -> SchemaRevisions:
    with database.connection_errors():
        before = migrate.current_revisions(database.engine)
        migrate.upgrade(database.engine, revision)
        after = migrate.current_revisions(database.engine)
    return SchemaRevisions(before=frozenset(before), after=frozenset(after))


def downgrade(database: Database, revision: str) -> frozenset[str]:
    """Down to `revision` (`base` drops the schema and its data); the revisions now applied."""
    with database.connection_errors():
        migrate.downgrade(database.engine, revision)
        return frozenset(migrate.current_revisions(database.engine))


@dataclass(frozen=True)
class SchemaStatus:
    applied: frozenset[str]
    heads: frozenset[str]

    @property
    def is_current(self) -> bool:
        return self.applied == self.heads


def status(database: Database) -> SchemaStatus:
    with database.connection_errors():
        applied = migrate.current_revisions(database.engine)
    return SchemaStatus(applied=frozenset(applied), heads=release_heads())


@functools.cache
def release_heads() -> frozenset[str]:
    """This release's head revisions: read from the migration scripts once per process
    (tens of milliseconds; the API's readiness probe asks every few seconds)."""
    return frozenset(migrate.head_revisions())
