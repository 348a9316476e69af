"""Fixtures of the web inbox's browser tests.

One `achilles api` per pytest session — real uvicorn on a free port, the session's
PostgreSQL, the real OIDC provider (`tests/oidc_provider.py`) — and one Debian Chromium
driven by Playwright. Each test gets a fresh browser context (its own cookie jar) and a
user of its own, and signs in through the provider's own sign-in page, as a person does.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    ViewportSize,
    sync_playwright,
)
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.models import Agent
from achilles.db.roles import Component
from achilles_dev.ports import free_port
from tests.db.factories import make_agent, make_owner
from tests.db.logins import login_url
from tests.oidc_provider import OidcProvider
from tests.waiting import wait_for

# Debian's Chromium: Playwright's own browser download is not reachable from every machine.
CHROMIUM_PATH = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# How long the page may take to show what the server did (SSE delivery, a re-read).
UI_TIMEOUT_MS = 10_000
DESKTOP: ViewportSize = {"width": 1280, "height": 900}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/web/" in str(item.fspath):
            item.add_marker(pytest.mark.db)


@dataclass(frozen=True)
class WebServer:
    url: str
    session_secret: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="package")
def web_server(
    request: pytest.FixtureRequest,
    database_url: str,
    oidc_provider: OidcProvider,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebServer]:
    """`achilles api` with the web inbox on, as `achilles dev up` runs it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The provider's web client accepts http://127.0.0.1:<any port>/auth/callback.
    session_secret = secrets.token_urlsafe(48)
    env = {
        **os.environ,
        "ACHILLES_DATABASE_URL": login_url(database_url, Component.API),  # its own login
        "ACHILLES_API_OIDC_ISSUER": oidc_provider.issuer,
        "ACHILLES_API_OIDC_AUDIENCE": oidc_provider.audience,
        "ACHILLES_API_OIDC_USER_CLAIM": oidc_provider.user_claim,
        "ACHILLES_API_WEB_CLIENT_ID": oidc_provider.web_client_id,
        "ACHILLES_API_WEB_CLIENT_SECRET": oidc_provider.web_client_secret,
        "ACHILLES_API_PUBLIC_URL": url,
        "ACHILLES_API_SESSION_SECRET": session_secret,
    }
    for name in ("KUBECONFIG", "ACHILLES_API_KUBE_AUDIENCE"):
        env.pop(name, None)  # no cluster in this tier: the API's Kubernetes parts are off
    log = tmp_path_factory.mktemp("web") / "api.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "achilles", "api", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = WebServer(url=url, session_secret=session_secret, log=log)
    try:
        # The browser starts while the server imports and connects (every test needs both).
        request.getfixturevalue("browser")
        try:
            wait_for(
                lambda: process.poll() is not None or _answers(f"{url}/healthz"),
                timeout=120,  # a bound for failing, not a pace: a loaded machine is slow
                what="achilles api to answer /healthz",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{server.log_text()}") from None
        assert process.poll() is None, f"achilles api exited:\n{server.log_text()}"
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def database(database_url: str) -> Iterator[Database]:
    """The services' handle on the session database (what the agents' side writes with)."""
    handle = Database(database_url)
    yield handle
    handle.dispose()


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    chromium = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)
    yield chromium
    chromium.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser profile: no cookies, no storage."""
    fresh = browser.new_context(viewport=DESKTOP)
    fresh.set_default_timeout(UI_TIMEOUT_MS)
    yield fresh
    fresh.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


@dataclass(frozen=True)
class Person:
    """A user of this test, with one agent of theirs."""

    user_key: str
    agent_id: int
    agent_name: str


AGENT_NAMESPACE = "team-a"


@pytest.fixture
def person(db: Engine) -> Person:
    """A user with one agent, recorded as the operator records an Agent resource's."""
    user_key = f"web-{uuid.uuid4().hex[:8]}@example.org"
    make_owner(db, user_key)
    agent_name = f"reporter-{uuid.uuid4().hex[:6]}"
    agent_id = make_agent(db, owner=user_key, name=agent_name)
    with Session(db) as session, session.begin():
        session.execute(
            update(Agent)
            .where(Agent.id == agent_id)
            .values(cr_uid=str(uuid.uuid4()), cr_namespace=AGENT_NAMESPACE, cr_name=agent_name)
        )
    return Person(user_key=user_key, agent_id=agent_id, agent_name=agent_name)


def sign_in(page: Page, server: WebServer, oidc_provider: OidcProvider, user_key: str) -> None:
    """Sign in as `user_key` through the provider's own sign-in form."""
    page.goto(f"{server.url}/")
    page.get_by_role("link", name="Sign in").click()
    page.locator("#username").fill(user_key)
    page.locator("#password").fill(oidc_provider.login_password)
    page.get_by_role("button", name="Login").click()
    page.wait_for_url(f"{server.url}/")
    page.get_by_text(f"Signed in as {user_key}").wait_for()
