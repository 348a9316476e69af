"""The migrated schema is seed 000's, and the models agree with the migrations."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, inspect, text

from achilles.db import migrate
from achilles.db.schema import metadata

ENGINE_TABLES = {"agents", "agent_runs", "agent_tools"}
NEIGHBOUR_TABLES = {"users", "agent_models", "tools", "platform_settings"}


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def test_upgrade_twice_is_a_no_op_and_downgrade_removes_everything(scratch_engine: Engine) -> None:
    migrate.upgrade(scratch_engine)
    assert migrate.current_revisions(scratch_engine) == migrate.head_revisions()
    assert _tables(scratch_engine) >= ENGINE_TABLES | NEIGHBOUR_TABLES

    migrate.upgrade(scratch_engine)
    assert migrate.current_revisions(scratch_engine) == migrate.head_revisions()

    migrate.downgrade(scratch_engine, "base")
    assert _tables(scratch_engine) == set()
    with scratch_engine.connect() as conn:
        functions = conn.execute(
            text("SELECT proname FROM pg_proc WHERE proname LIKE 'achilles_%'")
        ).scalars()
        assert list(functions) == []

    migrate.upgrade(scratch_engine)
    assert _tables(scratch_engine) >= ENGINE_TABLES | NEIGHBOUR_TABLES


def test_models_match_the_migrations(schema_diff: list[Any]) -> None:
    assert schema_diff == []


def test_check_constraints_carry_their_model_names(db_engine: Engine) -> None:
    """Alembic applies the naming convention to CHECK names; `op.f` keeps them as written."""
    expected = {
        constraint.name
        for table in metadata.sorted_tables
        for constraint in table.constraints
        if constraint.__class__.__name__ == "CheckConstraint" and constraint.name
    }
    with db_engine.connect() as conn:
        actual = set(
            conn.execute(text("SELECT conname FROM pg_constraint WHERE contype = 'c'")).scalars()
        )
    assert expected
    assert expected <= actual


COLUMNS = {
    # column: (type, nullable)
    "agents": {
        "id": ("BIGINT", False),
        "user_id": ("BIGINT", False),
        "name": ("TEXT", False),
        "description": ("TEXT", True),
        "prompt": ("TEXT", False),
        "schedule": ("JSONB", True),
        "model_id": ("BIGINT", True),
        "enabled": ("BOOLEAN", False),
        "admin_paused": ("BOOLEAN", False),
        "next_run_at": ("TIMESTAMP WITH TIME ZONE", True),
        "meta": ("JSONB", True),
        "created_at": ("TIMESTAMP WITH TIME ZONE", False),
        "updated_at": ("TIMESTAMP WITH TIME ZONE", False),
    },
    "agent_runs": {
        "id": ("BIGINT", False),
        "agent_id": ("BIGINT", False),
        "trigger": ("TEXT", False),
        "state": ("TEXT", False),
        "reason": ("TEXT", True),
        "output": ("TEXT", True),
        "tokens_used": ("BIGINT", False),
        "error": ("TEXT", True),
        "started_at": ("TIMESTAMP WITH TIME ZONE", True),
        "finished_at": ("TIMESTAMP WITH TIME ZONE", True),
        "heartbeat_at": ("TIMESTAMP WITH TIME ZONE", True),
        "created_at": ("TIMESTAMP WITH TIME ZONE", False),
    },
    "agent_tools": {
        "id": ("BIGINT", False),
        "agent_id": ("BIGINT", False),
        "tool_id": ("BIGINT", False),
        "created_at": ("TIMESTAMP WITH TIME ZONE", False),
    },
}


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_seed_columns(db_engine: Engine, table: str) -> None:
    with db_engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT column_name, upper(data_type), is_nullable = 'YES' "
                "FROM information_schema.columns WHERE table_name = :t"
            ),
            {"t": table},
        ).tuples()
        columns = {name: (type_name, nullable) for name, type_name, nullable in rows}
    for name, expected in COLUMNS[table].items():
        assert columns.get(name) == expected, f"{table}.{name}"
    # agent_runs deliberately has no updated_at: its milestones carry the history.
    if table in ("agent_runs", "agent_tools"):
        assert "updated_at" not in columns


def test_foreign_keys_and_their_delete_rules(db_engine: Engine) -> None:
    inspector = inspect(db_engine)
    rules = {
        (table, tuple(fk["constrained_columns"])): (
            fk["referred_table"],
            fk["options"].get("ondelete"),
        )
        for table in ENGINE_TABLES
        for fk in inspector.get_foreign_keys(table)
    }
    assert rules == {
        ("agents", ("user_id",)): ("users", "CASCADE"),
        ("agents", ("model_id",)): ("agent_models", "SET NULL"),
        ("agent_runs", ("agent_id",)): ("agents", "CASCADE"),
        ("agent_tools", ("agent_id",)): ("agents", "CASCADE"),
        ("agent_tools", ("tool_id",)): ("tools", "CASCADE"),
    }


def test_indexes_the_seed_marks(db_engine: Engine) -> None:
    with db_engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT indexname, indexdef FROM pg_indexes "
                "WHERE tablename IN ('agents', 'agent_runs', 'agent_tools')"
            )
        ).all()
        indexdefs = {name: definition for name, definition in rows}
    assert "(user_id)" in indexdefs["ix_agents_user_id"]
    assert "(model_id)" in indexdefs["ix_agents_model_id"]
    assert "(next_run_at)" in indexdefs["ix_agents_next_run_at"]
    assert "(finished_at)" in indexdefs["ix_agent_runs_finished_at"]
    assert "(agent_id)" in indexdefs["ix_agent_runs_agent_id"]
    assert "UNIQUE" in indexdefs["uq_agent_tools_agent_id_tool_id"]
    lock = indexdefs["uq_agent_runs_one_active_per_agent"]
    assert lock.startswith("CREATE UNIQUE INDEX")
    assert "(agent_id)" in lock
    assert "WHERE (state = ANY (ARRAY['queued'::text, 'running'::text]))" in lock


def test_updated_at_trigger_moves_on_update(db: Engine) -> None:
    with db.begin() as conn:
        conn.execute(text("INSERT INTO users (key) VALUES ('alice')"))
        conn.execute(
            text(
                "INSERT INTO agents (user_id, name, prompt, updated_at) "
                "SELECT id, 'a', 'p', now() - interval '1 day' FROM users"
            )
        )
    with db.begin() as conn:
        before = conn.execute(text("SELECT updated_at FROM agents")).scalar_one()
        conn.execute(text("UPDATE agents SET prompt = 'changed'"))
        after = conn.execute(text("SELECT updated_at FROM agents")).scalar_one()
    assert after > before


def test_platform_settings_singleton_exists_after_migration(db_engine: Engine) -> None:
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM platform_settings")).scalar_one() == 1


def test_the_migration_history_has_a_single_head() -> None:
    # A second head means two branches that the next migration cannot both follow.
    assert len(migrate.head_revisions()) == 1
