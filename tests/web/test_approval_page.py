"""An approval in the web inbox, in a real browser (issue 38): the card shows the tool
and its arguments laid out, as text (they are model-written), approve / reject, and what
happened after; the decision goes through the same service as the API and the CLI."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox import board
from achilles.db.tools import approvals
from achilles.domain.mcp_tools import APPROVAL_TTL, arguments_digest
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import catalogue
from tests.oidc_provider import OidcProvider
from tests.web.conftest import Person, WebServer, sign_in

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
