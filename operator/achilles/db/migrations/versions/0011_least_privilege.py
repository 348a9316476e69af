"""Least privilege: one role per component, and a runner that reaches only its own run.

Revision ID: 0011_least_privilege
Revises: 0010_api
Create Date: 2026-12-01

Roles (NOLOGIN groups; cluster-wide, so created if missing and never dropped). Logins
are members of one of them (`achilles db login COMPONENT LOGIN`); none owns a table,
is a superuser or bypasses row-level security: only the migrations' login owns the schema.

- `achilles_operator`: reads and writes the journal and the inbox (its loops, the
  mirror, the sweeper); reads the deleted agents' tokens and the event log. No DDL, no
  Knowledge Store.
- `achilles_api`: reads the journal and the inbox, writes replies, its idempotency keys
  and purges the event log. No runs written, no Knowledge Store.
- `achilles_runner`: shared by every run pod, so its grants alone give nothing: the rows
  it sees and writes are those of the run whose id and secret the session carries
  (`achilles.run_id`, `achilles.run_secret`, set when it connects). The operator puts a
  fresh secret in each run's Job and stores only its SHA-256 here
  (`agent_runs.runner_secret_hash`); `achilles_run_id()` is that run while it is queued
  or running, NULL otherwise, and every policy for the runner hangs on it. So a runner
  sees its run, its agent, its owner, its model and tools, its agent's inbox and its
  owner's documents (the KS policies key on the run's owner for runner sessions and
  ignore `achilles.ks_user_id`); after its run ended, nothing. It may claim its run
  (`achilles_claim_run`, which waits for the dispatching transaction and checks the
  secret on the locked row), beat, add tokens, finish it, and ask and move its inbox
  items; a trigger holds its run's writes to those transitions (tokens only grow,
  times are the database's).
- `achilles_ks_reader` (0002) stays what the KS reads switch to; the runner is a member.

Triggers that keep derived tables (revisions, owner events, the owner column of inbox
items, the deleted agents' tokens) run as the schema owner (SECURITY DEFINER), so they
hold whoever wrote the row and see every row they must, whatever the writer's policies.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_least_privilege"
down_revision: str | Sequence[str] | None = "0010_api"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATOR = "achilles_operator"
RUNNER = "achilles_runner"
API = "achilles_api"
KS_READER = "achilles_ks_reader"
GROUP_ROLES = (OPERATOR, RUNNER, API)

JOURNAL = ("users", "agent_models", "tools", "agent_tools", "platform_settings", "agents")
INBOX = ("agent_inbox_boards", "agent_inbox_items")
# Tables a runner reads rows of (each under a policy below).
RUNNER_TABLES = ("agent_runs", *JOURNAL, *INBOX)
KS_TABLES = ("ks_documents", "ks_groups", "ks_group_members", "ks_document_access", "ks_links")
# The run columns a runner writes; the rest (its agent, trigger, request key, secret,
# dispatch bookkeeping) only the operator does.
RUNNER_RUN_COLUMNS = (
    "state",
    "started_at",
    "heartbeat_at",
    "tokens_used",
    "output",
    "error",
    "reason",
    "finished_at",
)
DEFINER_TRIGGER_FUNCTIONS = (
    "achilles_inbox_item_owner",
    "achilles_inbox_items_follow_owner",
    "achilles_inbox_item_revision",
    "achilles_owner_event",
    "achilles_keep_deleted_agent_tokens",
)
# The runner's view: each table's rows of the session's run.
RUNNER_POLICIES = {
    "agent_runs": "id = achilles_run_id()",
    "agents": "id = achilles_run_agent_id()",
    "users": "id = achilles_run_owner_id()",
    "agent_models": "id = (SELECT a.model_id FROM agents a WHERE a.id = achilles_run_agent_id())",
    "agent_tools": "agent_id = achilles_run_agent_id()",
    "tools": (
        "id IN (SELECT t.tool_id FROM agent_tools t WHERE t.agent_id = achilles_run_agent_id())"
    ),
    "platform_settings": "true",
    "agent_inbox_boards": "agent_id = achilles_run_agent_id()",
    "agent_inbox_items": "agent_id = achilles_run_agent_id()",
}
_SEARCH_PATH = "SET search_path = pg_catalog, {schema}"


def _schema() -> str:
    name = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    return str(name)


def _create_roles(schema: str) -> None:
    for role in GROUP_ROLES:
        # CREATE ROLE has no IF NOT EXISTS; another database of the cluster (or a
        # concurrent migration) may have created it already.
        op.execute(
            f"""
            DO $$
            BEGIN
                IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                    CREATE ROLE {role} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
                END IF;
            EXCEPTION WHEN duplicate_object THEN
                NULL;
            END
            $$
            """
        )
        op.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
    # PostgreSQL 15 no longer lets everyone create in `public`; older servers did.
    op.execute(f'REVOKE CREATE ON SCHEMA "{schema}" FROM PUBLIC')
    op.execute(f"GRANT {KS_READER} TO {RUNNER}")


def _run_secret() -> None:
    op.add_column("agent_runs", sa.Column("runner_secret_hash", sa.LargeBinary, nullable=True))


def _runner_functions(schema: str) -> None:
    path = _SEARCH_PATH.format(schema=schema)
    # Superusers are members of every role; they are no runner (and bypass RLS anyway).
    op.execute(
        f"""
        CREATE FUNCTION achilles_session_is_runner() RETURNS boolean
        LANGUAGE sql STABLE {path} AS $$
            SELECT NOT r.rolsuper AND pg_has_role(session_user, '{RUNNER}', 'MEMBER')
            FROM pg_roles r WHERE r.rolname = session_user
        $$
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION achilles_run_secret_hash() RETURNS bytea
        LANGUAGE sql STABLE {path} AS $$
            SELECT sha256(convert_to(NULLIF(current_setting('achilles.run_secret', true), ''),
                                     'UTF8'))
        $$
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION achilles_run_id() RETURNS bigint
        LANGUAGE sql STABLE SECURITY DEFINER {path} AS $$
            SELECT r.id FROM agent_runs r
            WHERE r.id = NULLIF(current_setting('achilles.run_id', true), '')::bigint
              AND r.state IN ('queued', 'running')
              AND r.runner_secret_hash = achilles_run_secret_hash()
        $$
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION achilles_run_agent_id() RETURNS bigint
        LANGUAGE sql STABLE SECURITY DEFINER {path} AS $$
            SELECT r.agent_id FROM agent_runs r WHERE r.id = achilles_run_id()
        $$
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION achilles_run_owner_id() RETURNS bigint
        LANGUAGE sql STABLE SECURITY DEFINER {path} AS $$
            SELECT a.user_id FROM agents a JOIN agent_runs r ON r.agent_id = a.id
            WHERE r.id = achilles_run_id()
        $$
        """
    )
    # The claim locks the row first: a runner can start before the dispatching
    # transaction (which wrote the secret's hash) commits, and then waits for it.
    op.execute(
        f"""
        CREATE FUNCTION achilles_claim_run(run bigint, at timestamptz DEFAULT NULL)
        RETURNS boolean
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER {path} AS $$
        DECLARE
            found_state text;
            found_hash bytea;
        BEGIN
            SELECT state, runner_secret_hash INTO found_state, found_hash
            FROM agent_runs WHERE id = run FOR UPDATE;
            IF NOT FOUND OR found_state <> 'queued' THEN
                RETURN false;
            END IF;
            IF achilles_session_is_runner() AND (
                run IS DISTINCT FROM NULLIF(current_setting('achilles.run_id', true), '')::bigint
                OR found_hash IS NULL
                OR found_hash IS DISTINCT FROM achilles_run_secret_hash()
            ) THEN
                RAISE EXCEPTION 'run %: this session does not hold the run''s secret', run
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'a runner claims only the run its Job names (ACHILLES_RUN_SECRET)';
            END IF;
            UPDATE agent_runs
            SET state = 'running', started_at = coalesce(at, now()),
                heartbeat_at = coalesce(at, now())
            WHERE id = run;
            RETURN true;
        END
        $$
        """
    )
    op.execute("REVOKE ALL ON FUNCTION achilles_claim_run(bigint, timestamptz) FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION achilles_claim_run(bigint, timestamptz) TO {RUNNER}")
    # What a runner may do to its run row, whatever statement it sends.
    op.execute(
        """
        CREATE FUNCTION achilles_runner_run_rules() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.state = 'queued' AND NEW.state = 'running' THEN
                NEW.started_at := now();
                NEW.heartbeat_at := now();
                NEW.tokens_used := OLD.tokens_used;
            ELSIF OLD.state = 'running' AND NEW.state IN ('running', 'succeeded', 'failed') THEN
                IF NEW.tokens_used < OLD.tokens_used THEN
                    RAISE EXCEPTION 'run %: a runner only adds tokens (% -> %)',
                        OLD.id, OLD.tokens_used, NEW.tokens_used
                        USING ERRCODE = 'insufficient_privilege';
                END IF;
                IF NEW.started_at IS DISTINCT FROM OLD.started_at THEN
                    RAISE EXCEPTION 'run %: a runner does not move its start', OLD.id
                        USING ERRCODE = 'insufficient_privilege';
                END IF;
                IF NEW.heartbeat_at IS DISTINCT FROM OLD.heartbeat_at THEN
                    NEW.heartbeat_at := now();
                END IF;
                IF NEW.state = 'running' THEN
                    IF ROW(NEW.output, NEW.error, NEW.reason, NEW.finished_at)
                       IS DISTINCT FROM ROW(OLD.output, OLD.error, OLD.reason, OLD.finished_at)
                    THEN
                        RAISE EXCEPTION 'run %: an outcome comes with the end of the run', OLD.id
                            USING ERRCODE = 'insufficient_privilege';
                    END IF;
                ELSE
                    NEW.finished_at := now();
                END IF;
            ELSE
                RAISE EXCEPTION 'run %: a runner may not move its run from % to %',
                    OLD.id, OLD.state, NEW.state
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_runs_runner_rules BEFORE UPDATE ON agent_runs
        FOR EACH ROW WHEN (achilles_session_is_runner())
        EXECUTE FUNCTION achilles_runner_run_rules()
        """
    )
    # The owner whose documents a KS read sees: for a runner session its run's owner
    # (`achilles.ks_user_id` is ignored: the runner sets it, it does not choose it).
    op.execute(
        """
        CREATE OR REPLACE FUNCTION achilles_ks_user_id() RETURNS bigint
        LANGUAGE sql STABLE AS $$
            SELECT CASE WHEN achilles_session_is_runner() THEN achilles_run_owner_id()
                        ELSE NULLIF(current_setting('achilles.ks_user_id', true), '')::bigint
                   END
        $$
        """
    )
    # The loader's policies never hold in a runner's session.
    maintenance = (
        f"current_user <> '{KS_READER}' AND NOT achilles_session_is_runner()"
        " AND coalesce(current_setting('achilles.ks_maintenance', true), '') = 'on'"
    )
    for table in KS_TABLES:
        op.execute(
            f"ALTER POLICY {table}_maintain ON {table}"
            f" USING ({maintenance}) WITH CHECK ({maintenance})"
        )


def _definer_triggers(schema: str) -> None:
    path = _SEARCH_PATH.format(schema=schema)
    for function in DEFINER_TRIGGER_FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function}() SECURITY DEFINER {path}")


def _grants(schema: str) -> None:
    journal = ", ".join(JOURNAL)
    inbox = ", ".join(INBOX)
    # The operator.
    op.execute(
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {journal}, agent_runs, {inbox} TO {OPERATOR}"
    )
    op.execute(
        f"GRANT SELECT ON deleted_agent_tokens, agent_inbox_item_revisions, owner_events,"
        f" alembic_version TO {OPERATOR}"
    )
    op.execute(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO {OPERATOR}')
    # The API.
    op.execute(
        f"GRANT SELECT ON {journal}, agent_runs, deleted_agent_tokens,"
        f" agent_inbox_item_revisions, alembic_version TO {API}"
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON {inbox} TO {API}")
    op.execute(f"GRANT SELECT, DELETE ON owner_events TO {API}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON api_idempotency_keys TO {API}")
    op.execute(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO {API}')
    # The runner: rows of its run only (the policies), writes as above.
    op.execute(f"GRANT SELECT ON {', '.join(RUNNER_TABLES)} TO {RUNNER}")
    op.execute(f"GRANT UPDATE ({', '.join(RUNNER_RUN_COLUMNS)}) ON agent_runs TO {RUNNER}")
    op.execute(f"GRANT INSERT, UPDATE ON {inbox} TO {RUNNER}")
    op.execute(
        f"DO $$ BEGIN EXECUTE format('GRANT USAGE ON SEQUENCE %s TO {RUNNER}',"
        " pg_get_serial_sequence('agent_inbox_items', 'id')); END $$"
    )


def _policies() -> None:
    for table in RUNNER_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        for role in (OPERATOR, API):
            op.execute(
                f"CREATE POLICY {table}_{role.removeprefix('achilles_')} ON {table}"
                f" TO {role} USING (true) WITH CHECK (true)"
            )
        # WITH CHECK repeats USING except on the run row: a runner cannot change its
        # row's id (no UPDATE on it), and `achilles_run_id()` is NULL once the row ends.
        check = "true" if table == "agent_runs" else RUNNER_POLICIES[table]
        op.execute(
            f"CREATE POLICY {table}_runner ON {table} TO {RUNNER}"
            f" USING ({RUNNER_POLICIES[table]}) WITH CHECK ({check})"
        )


def upgrade() -> None:
    schema = _schema()
    _create_roles(schema)
    _run_secret()
    _runner_functions(schema)
    _definer_triggers(schema)
    _grants(schema)
    _policies()


def downgrade() -> None:
    schema = _schema()
    for table in RUNNER_TABLES:
        for suffix in ("operator", "api", "runner"):
            op.execute(f"DROP POLICY {table}_{suffix} ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    for function in DEFINER_TRIGGER_FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function}() SECURITY INVOKER RESET search_path")
    for role in GROUP_ROLES:
        op.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{schema}" FROM {role}')
        op.execute(f'REVOKE ALL ON ALL SEQUENCES IN SCHEMA "{schema}" FROM {role}')
        op.execute(f'REVOKE USAGE ON SCHEMA "{schema}" FROM {role}')
    op.execute(f"REVOKE {KS_READER} FROM {RUNNER}")
    legacy = (
        f"current_user <> '{KS_READER}'"
        " AND coalesce(current_setting('achilles.ks_maintenance', true), '') = 'on'"
    )
    for table in KS_TABLES:
        op.execute(
            f"ALTER POLICY {table}_maintain ON {table} USING ({legacy}) WITH CHECK ({legacy})"
        )
    op.execute(
        """
        CREATE OR REPLACE FUNCTION achilles_ks_user_id() RETURNS bigint
        LANGUAGE sql STABLE PARALLEL SAFE AS $$
            SELECT NULLIF(current_setting('achilles.ks_user_id', true), '')::bigint
        $$
        """
    )
    op.execute("DROP TRIGGER agent_runs_runner_rules ON agent_runs")
    op.execute("DROP FUNCTION achilles_runner_run_rules()")
    op.execute("DROP FUNCTION achilles_claim_run(bigint, timestamptz)")
    op.execute("DROP FUNCTION achilles_run_owner_id()")
    op.execute("DROP FUNCTION achilles_run_agent_id()")
    op.execute("DROP FUNCTION achilles_run_id()")
    op.execute("DROP FUNCTION achilles_run_secret_hash()")
    op.execute("DROP FUNCTION achilles_session_is_runner()")
    op.drop_column("agent_runs", "runner_secret_hash")
