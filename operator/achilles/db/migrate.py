"""Schema migrations, applied programmatically so the CLI and the chart's Job share one path.

We upgrade to `heads`, so a branch that has not been merged yet still applies;
`tests/db/test_schema.py` keeps the released history at a single head.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Engine, text

from achilles.errors import InvalidInputError, SchemaError

_MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Serialises concurrent upgraders (two operator replicas, a Helm hook and a person).
_MIGRATION_LOCK_KEY = 0x4AC41
_RELATIVE_STEP = re.compile(r"@?[+-]\d+$")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS_DIR))
    return config


def check_revision(revision: str) -> str:
    """`revision` if it names one: a revision id (or a unique prefix of one), `heads`,
    `head`, `base`, or a relative step (`-1`, `+2`, `0003_inbox+1`)."""
    named = _RELATIVE_STEP.sub("", revision)  # `-1` resolves against the database
    try:
        if named:
            ScriptDirectory.from_config(_config()).get_revisions(named)
    except CommandError as exc:
        known = ", ".join(sorted(head_revisions() | {"heads", "base"}))
        raise InvalidInputError(
            f"unknown revision {revision!r} (a revision id, e.g. {known}; see `achilles db"
            " current`)"
        ) from exc
    return revision


def _migrate(engine: Engine, step: Callable[[Config, str], None], revision: str) -> None:
    """Run an Alembic command in one transaction that holds the migration lock."""
    check_revision(revision)
    config = _config()
    with engine.begin() as connection:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
        config.attributes["connection"] = connection
        try:
            step(config, revision)
        except CommandError as exc:  # e.g. a "downgrade" to a revision above the current one
            raise SchemaError(f"cannot migrate to {revision!r}: {exc}") from exc


def upgrade(engine: Engine, revision: str = "heads") -> None:
    _migrate(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    _migrate(engine, command.downgrade, revision)


def current_revisions(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(MigrationContext.configure(connection).get_current_heads())


def head_revisions() -> set[str]:
    return set(ScriptDirectory.from_config(_config()).get_heads())
