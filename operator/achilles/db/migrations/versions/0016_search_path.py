"""No session's temporary tables reach the schema's functions; no login makes them
(issue 37).

Revision ID: 0016_search_path
Revises: 0015_owner_deactivated
Create Date: 2026-12-05

- Every function of the schema (not an extension's) runs with `search_path =
  pg_catalog, <schema>, pg_temp` (`db/function_paths.py` says why): 0011 and 0014 pinned
  `pg_catalog, <schema>` on the SECURITY DEFINER functions, which PostgreSQL reads as
  "the session's temporary schema first", so a runner's session that made a temporary
  `agent_runs` chose which run `achilles_run_id()` returned, and with a temporary
  `pg_roles` made `achilles_session_is_runner()` false. The rest had no path at all and
  followed the caller's.
- TEMPORARY on the database is revoked from PUBLIC: no component makes temporary
  tables, so none may (the database's owner keeps it). Only the database's owner or a
  superuser may revoke it; a migrations' login that is neither gets a WARNING naming the
  statement for the database's owner to run (docs/security.md).
- The API's group loses INSERT on the inbox's tables: people reply to items (UPDATE),
  only a run's agent asks (0011 gave the API more than it uses).
- `api_sessions`: the web inbox's sessions, server-side. The signed cookie names a
  session by a random id; the row (keyed by the id's SHA-256, never the id) says whose it
  is, until when, and whether it ended: sign-out ends it on every replica, so a copied
  cookie dies with it. The API reads and writes it; expired rows are its housekeeping's.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from achilles.db.function_paths import search_path_value

revision: str = "0016_search_path"
down_revision: str | Sequence[str] | None = "0015_owner_deactivated"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

API = "achilles_api"
SESSIONS = "api_sessions"
_TS = sa.DateTime(timezone=True)
INBOX = ("agent_inbox_boards", "agent_inbox_items")
# The functions 0011 and 0014 pinned to `pg_catalog, <schema>`; the others had no path.
PINNED_BEFORE = (
    "achilles_session_is_runner",
    "achilles_run_secret_hash",
    "achilles_run_id",
    "achilles_run_agent_id",
    "achilles_run_owner_id",
    "achilles_claim_run",
    "achilles_inbox_item_owner",
    "achilles_inbox_items_follow_owner",
    "achilles_inbox_item_revision",
    "achilles_owner_event",
    "achilles_keep_deleted_agent_tokens",
    "achilles_enqueue_notification",
    "achilles_notify_run_ended",
    "achilles_notify_agent_suspended",
    "achilles_notify_item_blocked",
)
# Every function of the current schema that no extension owns, as `name(args)`.
_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature, p.proname AS name
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace
  AND NOT EXISTS (
      SELECT FROM pg_depend d
      WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
ORDER BY p.oid
"""


def _schema() -> str:
    name = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    return str(name)


def _functions() -> list[sa.Row[tuple[str, str]]]:
    return list(op.get_bind().execute(sa.text(_FUNCTIONS)).tuples())


def _temporary(verb: str) -> None:
    """REVOKE (or GRANT back) TEMPORARY on this database from PUBLIC, where this login may."""
    preposition = "FROM" if verb == "REVOKE" else "TO"
    statement = f"{verb} TEMPORARY ON DATABASE %I {preposition} PUBLIC"
    op.execute(
        f"""
        DO $$
        BEGIN
            IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
               OR pg_has_role(current_user,
                              (SELECT datdba FROM pg_database
                               WHERE datname = current_database()), 'USAGE')
            THEN
                EXECUTE format('{statement}', current_database());
            ELSE
                RAISE WARNING '%', format(
                    'this login neither owns the database nor is a superuser: as its owner'
                    ' run: {statement}', current_database());
            END IF;
        END
        $$
        """
    )


def upgrade() -> None:
    path = search_path_value(_schema())
    for signature, _name in _functions():
        op.execute(f"ALTER FUNCTION {signature} SET search_path = {path}")
    _temporary("REVOKE")
    op.execute(f"REVOKE INSERT ON {', '.join(INBOX)} FROM {API}")
    _sessions()


def _sessions() -> None:
    op.create_table(
        SESSIONS,
        sa.Column("id_sha256", sa.LargeBinary, nullable=False),
        sa.Column("user_key", sa.Text, nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.Column("expires_at", _TS, nullable=False),
        sa.Column("ended_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id_sha256", name=op.f("pk_api_sessions")),
        sa.CheckConstraint("length(id_sha256) = 32", name=op.f("ck_api_sessions_id_sha256_length")),
    )
    op.create_index("ix_api_sessions_expires_at", SESSIONS, ["expires_at"])
    op.create_index("ix_api_sessions_user_key", SESSIONS, ["user_key"])
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {SESSIONS} TO {API}")


def downgrade() -> None:
    op.drop_table(SESSIONS)
    op.execute(f"GRANT INSERT ON {', '.join(INBOX)} TO {API}")
    _temporary("GRANT")
    schema = _schema()
    for signature, name in _functions():
        if name in PINNED_BEFORE:
            op.execute(f'ALTER FUNCTION {signature} SET search_path = pg_catalog, "{schema}"')
        else:
            op.execute(f"ALTER FUNCTION {signature} RESET search_path")
