"""`achilles inbox approval|approve|reject` (issue 38), as a person runs them: the real
console script against the real database. Exit 0 decided, 3 refused by the rules with
nothing written, 1 no such approval; the decision is committed even when no cluster
takes the wake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox import board
from achilles.db.journal.agents import create_agent
from achilles.db.tools import approvals
from achilles.domain.mcp_tools import APPROVAL_TTL, arguments_digest
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import catalogue
from tests.db.factories import make_owner
from tests.db.runner_support import achilles

pytestmark = pytest.mark.db

ARGUMENTS = {"path": "/tmp/report.txt", "content": "hello"}


def _ask(database: Database, db: Engine, key: str) -> int:
    spec = AgentToolSpec.model_validate(
        {"implementation": "mcp", "mcp": {"url": "http://127.0.0.1:9/mcp"}}
    )
    tool_id = catalogue.mirror_tool(database, "files", spec).tool_id
    with Session(db) as session, session.begin():
        agent_id = create_agent(session, owner_key=make_owner(db), name=key, prompt="p")
        item = board.ask(session, agent_id, key, "May I write a file?").item
        now = session.execute(text("SELECT now()")).scalar_one()
        approvals.create_approval(
            session, agent_id=agent_id, tool_id=tool_id, item_id=item.id, mcp_tool="write_file",
            arguments=ARGUMENTS, digest=arguments_digest(ARGUMENTS), reason="the report",
            run_id=0, expires_at=now + APPROVAL_TTL,
        )  # fmt: skip
    return item.id


def test_approve_then_reject_is_refused_and_shows_the_call(
    database: Database, db: Engine, database_url: str, tmp_path: Path
) -> None:
    item_id = _ask(database, db, "cli-approve")
    no_cluster = {"KUBECONFIG": str(tmp_path / "absent")}

    shown = achilles(database_url, "inbox", "approval", str(item_id), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["arguments"] == ARGUMENTS

    approved = achilles(
        database_url, "inbox", "approve", str(item_id), "--note", "ok", "--json", env=no_cluster
    )
    assert approved.returncode == 0, approved.stderr
    record = json.loads(approved.stdout)
    assert record["approval"]["state"] == "approved"
    assert record["wake"]["requested"] is False
    assert record["wake"]["detail"]

    refused = achilles(database_url, "inbox", "reject", str(item_id), env=no_cluster)
    assert refused.returncode == 3, refused.stderr
    assert "not written" in refused.stdout
    with db.connect() as conn:
        state = conn.execute(
            text("SELECT state FROM tool_approvals WHERE item_id = :i"), {"i": item_id}
        ).scalar()
    assert state == "approved"


def test_a_plain_item_has_no_approval_to_decide(
    database: Database, db: Engine, database_url: str
) -> None:
    with Session(db) as session, session.begin():
        agent_id = create_agent(session, owner_key=make_owner(db), name="plain", prompt="p")
        item = board.ask(session, agent_id, "q", "Ship it?").item
    done = achilles(database_url, "inbox", "approve", str(item.id))
    assert done.returncode == 1
    assert "asks no approval" in done.stderr
