"""What the driver's errors mean to a user: the database unreachable, or a schema older
than the code. Driver-level (psycopg only), so that the runner's claim, made before
SQLAlchemy is imported (`achilles.db.run_claim`), says the same as `Database` does.
"""

from __future__ import annotations

from achilles.errors import DatabaseUnavailable, SchemaError

# Nothing may hang on an unreachable database; libpq's default is to wait for the OS.
CONNECT_TIMEOUT_SECONDS = 10
# SQLSTATEs of a schema older than the code: no such table, column or function.
_SCHEMA_BEHIND = frozenset({"42P01", "42703", "42883"})


def unreachable(error: BaseException) -> DatabaseUnavailable:
    """`error`: the driver's connection error."""
    detail = " ".join(str(error).split())  # one line, whatever libpq said
    return DatabaseUnavailable(f"database unreachable: {detail}")


def schema_behind(error: BaseException) -> SchemaError | None:
    """A database never migrated (or migrated by an older release) fails every query
    with "relation ... does not exist"; say what to do instead. None for other errors."""
    if getattr(error, "sqlstate", None) not in _SCHEMA_BEHIND:
        return None
    detail = str(error).splitlines()[0]
    return SchemaError(
        f"the database schema is missing or out of date ({detail}): run `achilles db upgrade`"
    )
