"""Schema migrations, applied programmatically so the CLI and the chart's Job share one path.

We upgrade to `heads`, so a branch that has not been merged yet still applies;
`tests/db/test_schema.py` keeps the released history at a single head.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

_MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Serialises concurrent upgraders (two operator replicas, a Helm hook and a person).
_MIGRATION_LOCK_KEY = 0x4AC41


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS_DIR))
    return config


def _migrate(engine: Engine, step: Callable[[Config, str], None], revision: str) -> None:
    """Run an Alembic command in one transaction that holds the migration lock."""
    config = _config()
    with engine.begin() as connection:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
        config.attributes["connection"] = connection
        step(config, revision)


def upgrade(engine: Engine, revision: str = "heads") -> None:
    _migrate(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    _migrate(engine, command.downgrade, revision)


def current_revisions(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(MigrationContext.configure(connection).get_current_heads())


def head_revisions() -> set[str]:
    return set(ScriptDirectory.from_config(_config()).get_heads())
