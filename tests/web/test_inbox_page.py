"""The web inbox in a real browser: sign in through the real OIDC provider, answer what an
agent asked (through the real services), and watch the page follow the server live.

Each test signs in as a person of its own (a fresh browser context), against the one
`achilles api` server of the session (tests/web/conftest.py).
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import httpx
from itsdangerous import TimestampSigner
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Locator, Page, expect
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.domain.inbox import InboxItem, ItemState, ReplyKind
from achilles.domain.runs import RunTrigger
from achilles.services import inbox
from tests.oidc_provider import OidcProvider
from tests.web.conftest import AGENT_NAMESPACE, UI_TIMEOUT_MS, Person, WebServer, sign_in

QUESTION = "Which format should the weekly report use?"
CONTEXT = "Last week's report went out as a PDF; the team lead asked for slides."


def ask(
    database: Database, person: Person, key: str, question: str, context: str | None = None
) -> InboxItem:
    """The agent asks (as an operator acting for it does): a new blocked item."""
    return inbox.ask(database, str(person.agent_id), key, question, context).item


def item_now(database: Database, item_id: int) -> InboxItem:
    return inbox.item_details(database, item_id).listing.item


def waiting_card(page: Page, text: str) -> Locator:
    return page.locator("#waiting > li", has_text=text)


def test_sign_in_answer_and_follow_live(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    page: Page,
    person: Person,
    database: Database,
) -> None:
    asked = ask(database, person, "report-format", QUESTION, CONTEXT)
    # Script errors and CSP violations show up on the console (ours only: the provider's
    # sign-in page has no favicon).
    console_errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error" and message.location["url"].startswith(web_server.url):
            console_errors.append(f"{message.text} at {message.location['url']}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: console_errors.append(str(error)))
    sign_in(page, web_server, oidc_provider, person.user_key)
    card = waiting_card(page, QUESTION)
    expect(card).to_be_visible()
    expect(card).to_contain_text(CONTEXT)
    expect(card.get_by_role("heading")).to_contain_text(person.agent_name)
    expect(page).to_have_title("(1) Achilles inbox")
    # Every change below must reach this document without a reload.
    page.evaluate("window.sameDocument = true")

    card.get_by_label("Your reply").fill("Slides, please: ten at most.")
    card.get_by_role("button", name="Send answer").click()
    expect(waiting_card(page, QUESTION)).to_have_count(0)
    expect(page.locator("#other > li", has_text=QUESTION)).to_contain_text(
        "Slides, please: ten at most."
    )
    stored = item_now(database, asked.id)
    assert stored.reply is not None
    assert stored.reply.text == "Slides, please: ten at most."
    assert stored.revision == asked.revision + 1

    # The agent asks again: the new question appears (SSE).
    second = ask(database, person, "audience", "Who reads the report?")
    expect(waiting_card(page, "Who reads the report?")).to_be_visible()

    # Answered through another door (the API with a bearer token): it leaves live.
    token = oidc_provider.token_for(person.user_key)
    response = httpx.post(
        f"{web_server.url}/v1/inbox/{second.id}/reply",
        json={"kind": "answer", "text": "The leadership team.", "channel": "inbox"},
        headers={"Authorization": f"Bearer {token}", "If-Match": str(second.revision)},
    )
    assert response.status_code < 300, response.text
    expect(waiting_card(page, "Who reads the report?")).to_have_count(0)
    expect(page.locator("#waiting-empty")).to_be_visible()
    expect(page).to_have_title("Achilles inbox")
    assert page.evaluate("window.sameDocument") is True
    assert console_errors == []


def test_write_with_session_cookie_but_no_csrf_header_is_refused(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    page: Page,
    person: Person,
    database: Database,
) -> None:
    asked = ask(database, person, "csrf", QUESTION)
    sign_in(page, web_server, oidc_provider, person.user_key)
    reply_url = f"{web_server.url}/v1/inbox/{asked.id}/reply"
    body = json.dumps({"kind": "answer", "text": "forged", "channel": "inbox"})
    base_headers = {"Content-Type": "application/json", "If-Match": str(asked.revision)}

    # `page.request` sends the context's cookies: the session cookie rides along, as it
    # would on a forged cross-site request.
    for extra in ({}, {"X-CSRF-Token": "not-the-cookie-value"}):
        refused = page.request.post(reply_url, data=body, headers={**base_headers, **extra})
        assert refused.status == 403
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "X-CSRF-Token" in refused.json()["detail"]
    signed_out = page.request.post(f"{web_server.url}/auth/logout")
    assert signed_out.status == 403

    unchanged = item_now(database, asked.id)
    assert unchanged.revision == asked.revision
    assert unchanged.reply is None
    assert unchanged.state is ItemState.BLOCKED
    assert page.request.get(f"{web_server.url}/v1/me").ok  # still signed in

    # The same request with the CSRF cookie's value in the header is accepted: the
    # missing header is what refused it.
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "achilles_csrf")
    accepted = page.request.post(
        reply_url, data=body, headers={**base_headers, "X-CSRF-Token": csrf}
    )
    assert accepted.ok, accepted.text()
    assert item_now(database, asked.id).reply is not None


def _session_cookie(payload: dict[str, Any], secret: str) -> str:
    """A session cookie as Starlette's SessionMiddleware writes one, signed with `secret`."""
    data = base64.b64encode(json.dumps(payload).encode())
    return TimestampSigner(secret).sign(data).decode()


def test_forged_or_tampered_session_cookie_is_not_accepted(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    browser: Browser,
    context: BrowserContext,
    person: Person,
    database: Database,
) -> None:
    asked = ask(database, person, "forgery", QUESTION)
    me_url = f"{web_server.url}/v1/me"

    # Signed with a secret that is not the server's.
    forged = _session_cookie({"user_key": person.user_key}, "not-the-server-secret")
    context.add_cookies([{"name": "achilles_session", "value": forged, "url": web_server.url}])
    page = context.new_page()
    page.goto(f"{web_server.url}/")
    expect(page.get_by_role("link", name="Sign in")).to_be_visible()
    assert page.request.get(me_url).status == 401

    # A real session whose payload names someone else, keeping the server's signature.
    sign_in(page, web_server, oidc_provider, person.user_key)
    real = next(c["value"] for c in context.cookies() if c["name"] == "achilles_session")
    payload, _, signature = real.partition(".")
    session_fields = json.loads(base64.b64decode(payload))
    assert session_fields == {"user_key": person.user_key, "sid": session_fields["sid"]}
    other = base64.b64encode(json.dumps({"user_key": "someone-else"}).encode()).decode()
    tampered = f"{other}.{signature}"
    outsider = browser.new_context()
    try:
        outsider.add_cookies(
            [{"name": "achilles_session", "value": tampered, "url": web_server.url}]
        )
        assert outsider.request.get(me_url).status == 401
        refused = outsider.request.get(f"{web_server.url}/v1/inbox")
        assert refused.status == 401
        assert QUESTION not in refused.text()
    finally:
        outsider.close()

    # Control: the same payload signed with the server's secret is accepted, so the
    # signature is what refused the two above (the session's id names its live row).
    genuine = _session_cookie(session_fields, web_server.session_secret)
    checker = browser.new_context()
    try:
        checker.add_cookies([{"name": "achilles_session", "value": genuine, "url": web_server.url}])
        assert checker.request.get(me_url).json()["user_key"] == person.user_key
    finally:
        checker.close()
    assert item_now(database, asked.id).reply is None


def test_sign_in_callback_without_the_flow_is_refused(web_server: WebServer, page: Page) -> None:
    response = page.goto(f"{web_server.url}/auth/callback?code=stolen&state=guessed")
    assert response is not None
    assert response.status == 400
    expect(page.get_by_role("heading", name="Sign-in failed")).to_be_visible()
    assert page.request.get(f"{web_server.url}/v1/me").status == 401


def test_reload_keeps_the_session_and_the_browser_holds_no_token(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    context: BrowserContext,
    page: Page,
    person: Person,
    database: Database,
) -> None:
    ask(database, person, "reload", QUESTION, CONTEXT)
    sign_in(page, web_server, oidc_provider, person.user_key)
    expect(waiting_card(page, QUESTION)).to_be_visible()
    page.reload()
    expect(page.get_by_text(f"Signed in as {person.user_key}")).to_be_visible()
    expect(waiting_card(page, QUESTION)).to_contain_text(CONTEXT)

    cookies = {c["name"]: c for c in context.cookies()}
    session = cookies["achilles_session"]
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Lax"
    assert session["expires"] > 0  # bounded, not a browser-lifetime cookie
    payload = json.loads(base64.b64decode(session["value"].partition(".")[0]))
    # The user key and the session's random id (its row is server-side), no token.
    assert payload == {"user_key": person.user_key, "sid": payload["sid"]}
    assert cookies["achilles_csrf"]["httpOnly"] is False  # the page echoes it in a header
    assert "achilles_session" not in page.evaluate("document.cookie")
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0


def test_untrusted_question_is_shown_as_text(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    page: Page,
    person: Person,
    database: Database,
) -> None:
    question = (
        "<script>window.injected = 'script'</script>"
        "<img src=x onerror=\"window.injected = 'img'\"> Which report?"
    )
    context_text = '<iframe src="javascript:window.injected=1"></iframe><b>bold?</b>'
    ask(database, person, "xss", question, context_text)
    response = page.goto(f"{web_server.url}/")
    assert response is not None
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    sign_in(page, web_server, oidc_provider, person.user_key)
    card = waiting_card(page, "Which report?")
    expect(card.locator(".question")).to_have_text(question)
    expect(card.locator(".context")).to_have_text(context_text)
    assert card.locator("script, img, iframe, b").count() == 0
    assert page.evaluate("window.injected") is None


def test_phone_width(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    browser: Browser,
    person: Person,
    database: Database,
) -> None:
    long_word = "x" * 300  # an unbroken token must wrap, not widen the page
    asked = ask(database, person, "phone", f"{QUESTION} {long_word}", CONTEXT)
    phone = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    phone.set_default_timeout(UI_TIMEOUT_MS)
    try:
        page = phone.new_page()
        sign_in(page, web_server, oidc_provider, person.user_key)
        card = waiting_card(page, QUESTION)
        expect(card).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        for control, is_button in (
            (card.get_by_label("Your reply"), False),
            (card.get_by_role("button", name="Send answer"), True),
            (card.get_by_role("button", name="Ask to clarify"), True),
            (page.get_by_role("button", name="Sign out"), True),
        ):
            box = control.bounding_box()
            assert box is not None
            assert box["x"] >= 0, box
            assert box["x"] + box["width"] <= 390, box
            if is_button:
                assert box["height"] >= 44, box  # a touch target
        card.get_by_label("Your reply").fill("Which team is it for?")
        card.get_by_role("button", name="Ask to clarify").tap()
        expect(waiting_card(page, QUESTION)).to_have_count(0)
        stored = item_now(database, asked.id).reply
        assert stored is not None
        assert stored.kind is ReplyKind.CLARIFY
    finally:
        phone.close()


def _focused(page: Page) -> str:
    return str(
        page.evaluate(
            "(() => { const e = document.activeElement; const text = e.textContent.trim();"
            " return `${e.tagName.toLowerCase()}#${e.id}:${text.slice(0, 30)}`; })()"
        )
    )


def test_keyboard_only_answer(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    page: Page,
    person: Person,
    database: Database,
) -> None:
    asked = ask(database, person, "keyboard", QUESTION)
    sign_in(page, web_server, oidc_provider, person.user_key)
    expect(waiting_card(page, QUESTION)).to_be_visible()

    # The first Tab reaches the skip link; following it lands on the questions.
    page.keyboard.press("Tab")
    assert _focused(page).startswith("a#:Skip to the questions")
    page.keyboard.press("Enter")
    assert _focused(page).startswith("h2#waiting-heading")
    page.keyboard.press("Tab")
    assert _focused(page) == f"textarea#reply-{asked.id}:"
    page.keyboard.type("PDF, as before.")
    page.keyboard.press("Tab")
    assert _focused(page) == f"button#answer-{asked.id}:Send answer"
    outline = page.evaluate(
        "(() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, s.outlineWidth]; })()"
    )
    assert outline[0] != "none", outline  # a visible focus ring
    assert outline[1] != "0px", outline
    page.keyboard.press("Enter")

    expect(waiting_card(page, QUESTION)).to_have_count(0)
    assert item_now(database, asked.id).reply is not None
    # Nothing else waits: the focus goes to the (now empty) list's heading, not lost.
    expect(page.locator("#waiting-heading")).to_be_focused()


def test_stale_revision_is_shown_and_reread(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    page: Page,
    person: Person,
    database: Database,
) -> None:
    asked = ask(database, person, "stale", QUESTION)
    # This page misses every live update (as a phone in a tunnel would).
    page.route("**/v1/events", lambda route: route.abort())
    sign_in(page, web_server, oidc_provider, person.user_key)
    card = waiting_card(page, QUESTION)
    card.get_by_label("Your reply").fill("PDF.")

    # Meanwhile the agent re-asks with more detail: a new revision.
    reasked = ask(database, person, "stale", f"{QUESTION} (PDF or slides?)")
    assert reasked.revision == asked.revision + 1
    card.get_by_role("button", name="Send answer").click()

    card = waiting_card(page, "(PDF or slides?)")
    expect(card.get_by_role("alert")).to_contain_text("changed while you were writing")
    expect(card.get_by_label("Your reply")).to_have_value("PDF.")  # the draft is kept
    assert item_now(database, asked.id).reply is None

    card.get_by_role("button", name="Send answer").click()
    expect(waiting_card(page, QUESTION)).to_have_count(0)
    stored = item_now(database, asked.id)
    assert stored.reply is not None
    assert stored.reply.text == "PDF."


def test_a_newcomer_signs_in_and_out(
    web_server: WebServer, oidc_provider: OidcProvider, page: Page
) -> None:
    # Someone the engine has never heard of (no user row, no agents) is welcome too.
    newcomer = f"newcomer-{uuid.uuid4().hex[:8]}"
    sign_in(page, web_server, oidc_provider, newcomer)
    expect(page.get_by_text("Nothing is waiting for you.")).to_be_visible()
    expect(page.get_by_text("You have no agents yet.")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("link", name="Sign in")).to_be_visible()
    assert page.request.get(f"{web_server.url}/v1/me").status == 401


def _run(db: Engine, agent_id: int, output: str | None = None) -> int:
    """A manual run of the agent: queued, or (with `output`) claimed and succeeded."""
    with Session(db) as session, session.begin():
        queued = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
        assert queued.is_queued
        if output is not None:
            assert journal.claim_run(session, queued.run_id)
            assert journal.succeed_run(session, queued.run_id, output)
    return queued.run_id


def test_agents_runs_and_run_now(
    web_server: WebServer, oidc_provider: OidcProvider, page: Page, person: Person, db: Engine
) -> None:
    output = "Weekly report\n" + "\n".join(f"line {n}" for n in range(60))
    finished = _run(db, person.agent_id, output)
    sign_in(page, web_server, oidc_provider, person.user_key)
    agent = page.locator("#agents > li", has_text=person.agent_name)
    expect(agent).to_contain_text(f"namespace {AGENT_NAMESPACE}")
    run = agent.locator(f'[data-run="{finished}"]')
    expect(run).to_contain_text("succeeded")

    # The list carries a preview; opening the output fetches all of it.
    run.get_by_text("Output").click()
    expect(run.locator("pre")).to_contain_text("line 59")

    # A run that starts while the page is open appears (SSE), the open output stays open.
    queued = _run(db, person.agent_id)
    expect(agent.locator(f'[data-run="{queued}"]')).to_contain_text("queued")
    expect(agent.locator(f'[data-run="{finished}"] pre')).to_be_visible()

    # Run now: CSRF header and an idempotency key, and the API's answer shown. This tier
    # has no cluster, so the API refuses with a problem the card must show as it came.
    with (
        page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/runs")) as sent,
        page.expect_response(lambda r: r.request.method == "POST") as answered,
    ):
        agent.get_by_role("button", name="Run now").click()
    assert sent.value.headers.get("idempotency-key")
    assert sent.value.headers.get("x-csrf-token")
    problem = answered.value.json()
    assert answered.value.status >= 400, problem
    expect(agent.get_by_role("alert")).to_contain_text(problem["detail"])
    expect(agent.get_by_role("button", name="Run now")).to_be_focused()


def test_an_ended_session_returns_to_sign_in(
    web_server: WebServer,
    oidc_provider: OidcProvider,
    context: BrowserContext,
    page: Page,
    person: Person,
    database: Database,
) -> None:
    sign_in(page, web_server, oidc_provider, person.user_key)
    expect(page.locator("#waiting-empty")).to_be_visible()
    # The session ends while the page is open (signed out in another tab, or expired):
    # the next read the page makes is refused, and it goes back to the sign-in page.
    context.clear_cookies(name="achilles_session")
    ask(database, person, "after-sign-out", QUESTION)
    expect(page.get_by_role("link", name="Sign in")).to_be_visible()
    expect(page.get_by_text(QUESTION)).to_have_count(0)
