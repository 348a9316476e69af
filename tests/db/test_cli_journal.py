"""`achilles db|runs|budget|users` as a person runs them: a real process, a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, text

from tests.db.factories import make_agent, make_owner, set_settings


def achilles(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ACHILLES_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "achilles", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_db_upgrade_is_idempotent(db: Engine, database_url: str) -> None:
    result = achilles(database_url, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stdout
    current = achilles(database_url, "db", "current")
    assert "up to date" in current.stdout


def test_db_upgrade_without_a_database_is_a_clear_error(database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ACHILLES_DATABASE_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "achilles", "db", "upgrade"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "ACHILLES_DATABASE_URL" in result.stderr


def test_unreachable_database_exits_1(database_url: str) -> None:
    result = achilles("postgresql://nobody@127.0.0.1:1/none", "runs", "list")
    assert result.returncode == 1
    assert "database unreachable" in result.stderr


def test_users_upsert_and_deactivation(db: Engine, database_url: str) -> None:
    created = achilles(database_url, "users", "upsert", "carol", "--timezone", "Asia/Kathmandu")
    assert created.returncode == 0, created.stderr
    assert "created" in created.stdout
    make_agent(db, "carol")
    deactivated = achilles(database_url, "users", "upsert", "carol", "--inactive")
    assert "switched off 1 agent" in deactivated.stdout
    with db.connect() as conn:
        row = conn.execute(text("SELECT timezone, active FROM users WHERE key = 'carol'")).one()
        assert tuple(row) == ("Asia/Kathmandu", False)
        assert conn.execute(text("SELECT enabled FROM agents")).scalar_one() is False


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("users", "upsert", "dave", "--timezone", "Mars/Olympus"), "--timezone"),
        (("runs", "list", "--state", "paused"), "--state"),
        (("runs", "list", "--limit", "0"), "--limit"),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    database_url: str, args: tuple[str, ...], needle: str
) -> None:
    result = achilles(database_url, *args)
    assert result.returncode == 2
    assert needle in result.stderr


def test_enqueue_list_and_budget(db: Engine, database_url: str) -> None:
    set_settings(db, agent_weekly_token_budget=1234)
    owner = make_owner(db, "erin")
    agent_id = make_agent(db, owner, name="digest")

    first = achilles(database_url, "runs", "enqueue", "digest", "--json")
    assert json.loads(first.stdout)["state"] == "queued"
    second = achilles(database_url, "runs", "enqueue", str(agent_id))
    assert "skipped (already_running)" in second.stdout

    listed = json.loads(
        achilles(database_url, "runs", "list", "--agent", "digest", "--json").stdout
    )
    assert [(r["state"], r["reason"]) for r in listed] == [
        ("skipped", "already_running"),
        ("queued", None),
    ]
    # docs/runner.md: the insert the one-active-run index refused used a number, so the
    # skipped row's id is one further on; no race is needed for a gap.
    assert listed[0]["id"] == listed[1]["id"] + 2
    only_queued = json.loads(
        achilles(database_url, "runs", "list", "--state", "queued", "--json").stdout
    )
    assert len(only_queued) == 1

    shown = json.loads(achilles(database_url, "budget", "show", "--owner", "erin", "--json").stdout)
    assert (shown["used"], shown["limit"], shown["exhausted"]) == (0, 1234, False)


def test_runs_list_and_show_read_through_the_apis_read_service(
    db: Engine, database_url: str
) -> None:
    """`runs list --agent` takes an id, a unique name or, like the API, an Agent's
    `namespace/name` (services/journal_reads answers both); a name two agents share is
    refused, naming the way out; `runs show --json` keeps its keys, in order."""
    owner = make_owner(db, "fay")
    agent_id = make_agent(db, owner, name="weekly")
    make_agent(db, owner, name="twin")
    make_agent(db, owner, name="twin")
    db_update = text(
        "UPDATE agents SET cr_namespace = 'team', cr_name = 'weekly-cr' WHERE id = :id"
    )
    with db.begin() as conn:
        conn.execute(db_update, {"id": agent_id})
    queued = json.loads(achilles(database_url, "runs", "enqueue", "weekly", "--json").stdout)

    for ref in ("team/weekly-cr", "weekly", str(agent_id)):
        listed = json.loads(achilles(database_url, "runs", "list", "--agent", ref, "--json").stdout)
        assert [run["id"] for run in listed] == [queued["run_id"]], ref
    assert achilles(database_url, "runs", "list", "--agent", "team/other").returncode == 1
    ambiguous = achilles(database_url, "runs", "list", "--agent", "twin")
    assert ambiguous.returncode == 1
    assert "ambiguous; use the id or namespace/name" in ambiguous.stderr

    shown = json.loads(
        achilles(database_url, "runs", "show", str(queued["run_id"]), "--json").stdout
    )
    assert list(shown) == [
        "id", "agent_id", "agent", "trigger", "state", "reason", "tokens_used", "error",
        "output", "created_at", "started_at", "finished_at", "heartbeat_at", "used",
    ]  # fmt: skip
    assert (shown["agent_id"], shown["agent"], shown["state"]) == (agent_id, "weekly", "queued")
    missing = achilles(database_url, "runs", "show", str(queued["run_id"] + 1000))
    assert (missing.returncode, missing.stderr.strip()) == (
        1,
        f"error: run {queued['run_id'] + 1000} not found",
    )

    missing = achilles(database_url, "budget", "show", "--owner", "nobody")
    assert missing.returncode == 1
    assert "nobody" in missing.stderr


def test_enqueue_refused_by_a_durable_lock_writes_nothing(db: Engine, database_url: str) -> None:
    make_agent(db, name="paused", admin_paused=True)
    result = achilles(database_url, "runs", "enqueue", "paused")
    assert result.returncode == 1
    assert "admin_paused" in result.stderr
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM agent_runs")).scalar_one() == 0


def test_parallel_cli_enqueues_from_separate_processes(db: Engine, database_url: str) -> None:
    make_agent(db, name="raced")
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(
            pool.map(
                lambda _: achilles(database_url, "runs", "enqueue", "raced", "--json"), range(12)
            )
        )
    states = sorted(json.loads(r.stdout)["state"] for r in results)
    assert states == ["queued"] + ["skipped"] * 11
