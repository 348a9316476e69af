"""An approval in the web inbox, in a real browser (issue 38): the card shows the tool
and its arguments laid out, as text (they are model-written), approve / reject, and what
happened after; the decision goes through the same service as the API and the CLI.
Approving in the page makes the call exactly once and rejecting never makes it, as the
registry's server-memory's own file shows after the agent's next run (a real runner)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from playwright.sync_api import Page, expect
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox import board
from achilles.db.journal import runs as journal
from achilles.db.journal.models import Agent, AgentRun
from achilles.db.tools import approvals
from achilles.domain.mcp_tools import APPROVAL_TTL, arguments_digest
from achilles.domain.runs import RunTrigger
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.k8s.secrets import SecretUnavailable
from achilles.services import catalogue, mcp_sources
from achilles_dev.mcp_servers import McpServer, memory_entities
from tests.db.factories import make_owner
from tests.db.runner_support import add_model, queue_run, run_row, run_to_end, serving
from tests.oidc_provider import OidcProvider
from tests.web.conftest import AGENT_NAMESPACE, Person, WebServer, sign_in

HOSTILE = "<img src=x onerror=window.injected=1><b>Ada</b>"


def ask_approval(
    database: Database, db: Engine, person: Person, key: str, arguments: dict[str, Any]
) -> int:
    spec = AgentToolSpec.model_validate(
        {"implementation": "mcp", "mcp": {"url": "http://127.0.0.1:9/mcp"}}
    )
    tool_id = catalogue.mirror_tool(database, "memory-web", spec).tool_id
    with Session(db) as session, session.begin():
        item = board.ask(
            session,
            person.agent_id,
            f"approval-{key}",
            f"May I call memory__create_entities? ({key})",
        ).item
        now = session.execute(text("SELECT now()")).scalar_one()
        approvals.create_approval(
            session, agent_id=person.agent_id, tool_id=tool_id, item_id=item.id,
            mcp_tool="create_entities", arguments=arguments,
            digest=arguments_digest(arguments), reason="<script>to remember</script>",
            run_id=0, expires_at=now + APPROVAL_TTL,
        )  # fmt: skip
    return item.id


def _state(db: Engine, item_id: int) -> str:
    with db.connect() as conn:
        return str(
            conn.execute(
                text("SELECT state FROM tool_approvals WHERE item_id = :i"), {"i": item_id}
            ).scalar()
        )


def test_an_approval_is_shown_as_what_it_is_and_decided_in_the_page(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    page: Page,
    person: Person,
    database: Database,
    db: Engine,
) -> None:
    arguments = {"entities": [{"name": HOSTILE, "entityType": "person"}], "note": "plain"}
    approve_id = ask_approval(database, db, person, "yes", arguments)
    reject_id = ask_approval(database, db, person, "no", {"note": "second"})

    sign_in(page, web_server, oidc_provider, person.user_key)

    card = page.locator(f"#item-{approve_id}")
    expect(card.get_by_role("heading")).to_contain_text("asks to make a call")
    expect(card.locator(".approval-tool")).to_contain_text("memory-web / create_entities")
    expect(card.locator("dl.arguments dt")).to_have_text(["entities", "note"])
    expect(card.locator("dl.arguments dd").nth(1)).to_have_text("plain")
    expect(card.locator("dl.arguments dd").first).to_contain_text(HOSTILE)
    expect(card.locator(".reason q")).to_have_text("<script>to remember</script>")
    assert card.locator("img, b, script").count() == 0
    assert page.evaluate("window.injected") is None
    expect(card.get_by_label("Your reply")).to_have_count(0)  # a decision, not a text reply

    card.get_by_role("button", name="Approve").click()
    expect(card.locator(".approval-state")).to_contain_text("Approved")
    assert _state(db, approve_id) == "approved"

    other = page.locator(f"#item-{reject_id}")
    other.get_by_role("button", name="Reject").click()
    expect(other.locator(".approval-state")).to_contain_text("Rejected: the call was not made.")
    assert _state(db, reject_id) == "rejected"
    expect(page.locator("#waiting-empty")).to_be_visible()


def _no_secrets(name: str, key: str) -> bytes:
    raise SecretUnavailable(f"Secret {name} does not exist")


def _entity(name: str) -> dict[str, Any]:
    return {"entities": [{"name": name, "entityType": "person", "observations": ["x"]}]}


def test_approving_in_the_page_makes_the_call_once_and_rejecting_never(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    page: Page,
    database: Database,
    db: Engine,
    database_url: str,
    mcp_memory: McpServer,
) -> None:
    assert mcp_memory.state is not None
    suffix = uuid.uuid4().hex[:6]
    source = f"memory-{suffix}"
    create = f"{source}__create_entities"
    spec = AgentToolSpec.model_validate({"implementation": "mcp", "mcp": {"url": mcp_memory.url}})
    tool_id = catalogue.mirror_tool(database, source, spec).tool_id
    # The SDK client runs an event loop: not on this thread, where Playwright's runs.
    with ThreadPoolExecutor(max_workers=1) as pool:
        listed = pool.submit(mcp_sources.discover, database, _no_secrets, source).result()
    assert listed is not None
    assert listed.ready, listed.message
    yes, no = f"Ada-{suffix}", f"Bo-{suffix}"
    script = {
        "rules": [
            {
                "when": {"turn": 0, "contains": "Approvals decided"},
                "reply": {"content": "${last_user}"},
            },
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [
                        {"name": create, "arguments": {**_entity(yes), "reason_for_owner": "yes"}},
                        {"name": create, "arguments": {**_entity(no), "reason_for_owner": "no"}},
                    ]
                },
            },
        ]
    }
    owner = make_owner(db, f"web-{suffix}@example.org")
    with serving(script) as server:
        model = add_model(db, server, name=f"model-{suffix}")
        asking = queue_run(db, owner=owner, model=model, tool_ids=[tool_id])
        with Session(db) as session, session.begin():
            agent_id = session.execute(
                select(AgentRun.agent_id).where(AgentRun.id == asking)
            ).scalar_one()
            session.execute(  # as the operator records an Agent resource's
                update(Agent)
                .where(Agent.id == agent_id)
                .values(cr_uid=str(uuid.uuid4()), cr_namespace=AGENT_NAMESPACE, cr_name="keeper")
            )
        code, log = run_to_end(database_url, asking)
        assert code == 0, log
        with db.connect() as conn:
            items = dict(
                conn.execute(
                    text(
                        "SELECT arguments->'entities'->0->>'name', item_id FROM tool_approvals"
                        " WHERE agent_id = :a"
                    ),
                    {"a": agent_id},
                )
                .tuples()
                .all()
            )
        assert set(items) == {yes, no}

        sign_in(page, web_server, oidc_provider, owner)
        approved = page.locator(f"#item-{items[yes]}")
        approved.get_by_role("button", name="Approve").click()
        expect(approved.locator(".approval-state")).to_contain_text("Approved")
        rejected = page.locator(f"#item-{items[no]}")
        rejected.get_by_role("button", name="Reject").click()
        expect(rejected.locator(".approval-state")).to_contain_text("Rejected")
        assert memory_entities(mcp_memory.state).count(yes) == 0  # deciding makes no call

        with Session(db) as session, session.begin():
            woken = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
        assert woken.is_queued
        code, log = run_to_end(database_url, woken.run_id)
        assert code == 0, log

    # The server's own record: the approved call once, the rejected one never.
    entities = memory_entities(mcp_memory.state)
    assert (entities.count(yes), entities.count(no)) == (1, 0)
    told = run_row(db, woken.run_id).output
    assert told is not None
    assert '"outcome": "executed"' in told
    assert '"outcome": "rejected"' in told
    assert (_state(db, items[yes]), _state(db, items[no])) == ("executed", "rejected")
    page.reload()  # what happened after, as the owner sees it
    expect(approved.locator(".approval-state")).to_contain_text("Approved: the call was made.")
    expect(rejected.locator(".approval-state")).to_contain_text("Rejected: the call was not")
