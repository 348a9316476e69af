"""The API's answers and sessions, hardened (issue 37, items 6 and 9), through the real
uvicorn, the real OIDC provider and the real PostgreSQL.

- Every `/v1` answer says `Cache-Control: no-store`, errors included.
- A 503 names the unavailable service in our words: no host, port, database or login
  from libpq's (or urllib3's) text.
- An ID token of the issuer is no access token, whatever its `aud`.
- Signing out ends the web session server-side: a copy of the cookie taken before is
  refused afterwards.
- A deactivated owner (`users.active` false) is refused (403) whatever they hold, and
  their open event streams end.
- An event stream ends when the token that opened it expires.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy import Engine, text

from achilles.api.app import create_app
from achilles.api.identity.caller import Authenticator
from achilles.api.identity.oidc import OidcVerifier
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from achilles_dev import oidc
from achilles_dev.ports import free_port
from tests.api.conftest import ServedApi, Tokens
from tests.api.support import (
    RecordingRunRequester,
    assert_problem,
    bearer,
    listening_socket,
    make_cr_agent,
    served,
)
from tests.db.factories import make_owner
from tests.oidc_provider import OidcProvider
from tests.waiting import wait_for

# Longer than any wait below: a stream that should end and does not fails on its read.
STREAM_READ_TIMEOUT = 25.0


def test_every_v1_answer_is_no_store(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    make_owner(db, "alice")
    alice = bearer(tokens("alice"))
    answers = [
        httpx.get(f"{api.url}/v1/me", headers=alice, timeout=10),
        httpx.get(f"{api.url}/v1/agents", timeout=10),
        httpx.get(f"{api.url}/v1/runs/424242", headers=alice, timeout=10),
        httpx.post(f"{api.url}/v1/inbox/1/reply", headers=alice, content=b"{", timeout=10),
    ]
    assert [answer.status_code for answer in answers] == [200, 401, 404, 422]
    assert [answer.headers.get("cache-control") for answer in answers] == ["no-store"] * 4


def test_a_503_names_no_host_port_database_or_login(
    api_settings: ApiSettings, tokens: Tokens
) -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql+psycopg://leaky_login:pw@127.0.0.1:{port}/secret_db"
    database = Database(url, pool_size=1)
    app = create_app(
        api_settings.model_copy(update={"database_url": url}),
        database,
        run_requester=RecordingRunRequester(),
    )
    try:
        with served(app) as base:
            response = httpx.get(f"{base}/v1/agents", headers=bearer(tokens("alice")), timeout=30)
    finally:
        database.dispose()
    problem = assert_problem(response, 503)
    for secret in ("leaky_login", "secret_db", str(port), "127.0.0.1", "connection"):
        assert secret not in response.text, secret
    assert problem["detail"] == "the database cannot be reached right now; try again shortly"
    assert response.headers["retry-after"] == "5"


def test_an_id_token_is_not_an_access_token(
    api: ServedApi, oidc_provider: OidcProvider, db: Engine
) -> None:
    """The provider's ID token names the user and, here, even the API's audience: it is
    still refused, as an ID token."""
    answer = oidc.token_response_for(
        oidc_provider.issuer, "alice", password=oidc_provider.login_password
    )
    response = httpx.get(f"{api.url}/v1/me", headers=bearer(answer["id_token"]), timeout=10)
    assert "ID token" in assert_problem(response, 401)["detail"]
    accepted = httpx.get(f"{api.url}/v1/me", headers=bearer(answer["access_token"]), timeout=10)
    assert accepted.status_code == 200


@pytest.fixture
def web_api(
    api_settings: ApiSettings, api_database: Database, oidc_provider: OidcProvider, db: Engine
) -> Iterator[str]:
    """The API with the web inbox on, served where its public URL says."""
    listener = listening_socket()
    public_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    settings = ApiSettings.model_validate(
        api_settings.model_dump()
        | {
            "web_client_id": oidc_provider.web_client_id,
            "web_client_secret": oidc_provider.web_client_secret,
            "public_url": public_url,
            "session_secret": "a-session-secret-of-the-tests-" + "x" * 20,
        }
    )
    app = create_app(settings, api_database, run_requester=RecordingRunRequester())
    with served(app, listener) as url:
        yield url


@contextmanager
def _signed_in(url: str, provider: OidcProvider, user_key: str) -> Iterator[httpx.Client]:
    """A browser-like client signed in to the web inbox through the provider's form."""
    with httpx.Client(timeout=10, follow_redirects=False) as browser:
        landed = oidc.sign_in_through(
            browser, f"{url}/auth/login", user_key, password=provider.login_password
        )
        assert landed.status_code == 303, landed.text
        yield browser


def test_a_copied_session_cookie_dies_at_sign_out(
    web_api: str, oidc_provider: OidcProvider
) -> None:
    with _signed_in(web_api, oidc_provider, "alice") as browser:
        copied = browser.cookies.get("achilles_session")
        assert copied
        assert browser.get(f"{web_api}/v1/me").json()["via"] == "session"
        browser.get(f"{web_api}/")  # the page: its CSRF cookie
        signed_out = browser.post(
            f"{web_api}/auth/logout",
            headers={"X-CSRF-Token": browser.cookies.get("achilles_csrf") or ""},
        )
        assert signed_out.status_code == 204
    with httpx.Client(timeout=10, cookies={"achilles_session": copied}) as thief:
        response = thief.get(f"{web_api}/v1/me")
    assert "session has ended" in assert_problem(response, 401)["detail"]


def _deactivate(db: Engine, user_key: str) -> None:
    with db.begin() as conn:
        conn.execute(text("UPDATE users SET active = false WHERE key = :k"), {"k": user_key})


@contextmanager
def _stream(url: str, headers: dict[str, str]) -> Iterator[Iterator[str]]:
    """An open `/v1/events` stream, read up to its `ready` event; yields its lines."""
    timeout = httpx.Timeout(10, read=STREAM_READ_TIMEOUT)
    with httpx.stream("GET", f"{url}/v1/events", headers=headers, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        lines = response.iter_lines()
        for line in lines:
            if line == "event: ready":
                break
        yield lines


def _ends(lines: Iterator[str]) -> float:
    """Reads the stream to its end; how long that took. A stream still open after
    `STREAM_READ_TIMEOUT` fails the test (at its next line, a keepalive at the latest, or
    by httpx's ReadTimeout)."""
    started = time.monotonic()
    for _line in lines:
        assert time.monotonic() - started < STREAM_READ_TIMEOUT, "the stream is still open"
    return time.monotonic() - started


def test_a_deactivated_owner_is_refused_and_their_stream_ends(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    make_cr_agent(db, "alice", name="helper")
    alice = bearer(tokens("alice"))
    assert httpx.get(f"{api.url}/v1/agents", headers=alice, timeout=10).status_code == 200
    with _stream(api.url, alice) as lines:
        _deactivate(db, "alice")
        assert _ends(lines) < STREAM_READ_TIMEOUT

    def refused() -> bool:
        return httpx.get(f"{api.url}/v1/agents", headers=alice, timeout=10).status_code == 403

    wait_for(refused, 15, what="alice's deactivation to be seen")
    response = httpx.get(f"{api.url}/v1/me", headers=alice, timeout=10)
    assert "deactivated" in assert_problem(response, 403)["detail"]


def test_a_deactivated_owners_web_session_is_refused(
    web_api: str, oidc_provider: OidcProvider, db: Engine
) -> None:
    make_owner(db, "alice")
    with _signed_in(web_api, oidc_provider, "alice") as browser:
        assert browser.get(f"{web_api}/v1/me").status_code == 200
        _deactivate(db, "alice")
        wait_for(
            lambda: browser.get(f"{web_api}/v1/me").status_code == 403,
            15,
            what="the session's owner to be refused",
        )


@pytest.fixture(scope="module")
def short_token_provider(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[oidc.ProviderSettings]:
    """A second real provider whose access tokens live 3 seconds."""
    port = free_port()
    settings = oidc.ProviderSettings(
        issuer=f"http://127.0.0.1:{port}",
        listen=f"127.0.0.1:{port}",
        web_client_secret="a-web-secret-of-the-tests",
        access_token_lifetime=3,
    )
    running = oidc.start(settings, log=tmp_path_factory.mktemp("short-oidc") / "provider.log")
    try:
        yield settings
    finally:
        running.stop()


def test_an_event_stream_ends_when_its_token_expires(
    api_settings: ApiSettings,
    api_database: Database,
    short_token_provider: oidc.ProviderSettings,
    db: Engine,
) -> None:
    issuer, audience = short_token_provider.issuer, short_token_provider.api_audience
    settings = api_settings.model_copy(
        update={"oidc_issuer": issuer, "oidc_audience": audience, "sse_keepalive_seconds": 60}
    )
    # One second of leeway instead of 30, so the test waits seconds, not half a minute.
    verifier = OidcVerifier(issuer, audience, "sub", ("RS256",), leeway=1)
    app = create_app(
        settings,
        api_database,
        authenticator=Authenticator(oidc=verifier, kubernetes=None),
        run_requester=RecordingRunRequester(),
    )
    with served(app) as url:
        token = oidc.token_for(issuer, "alice", password=short_token_provider.dev_password)
        with _stream(url, bearer(token)) as lines:
            assert _ends(lines) < STREAM_READ_TIMEOUT
        again = httpx.get(f"{url}/v1/events", headers=bearer(token), timeout=10)
    assert "expired" in assert_problem(again, 401)["detail"]
