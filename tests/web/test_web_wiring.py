"""The web inbox's wiring without a browser: sign-in failures are pages, never 500s; the
security headers are on the web paths only; bearer callers get no CSRF cookie.

The app is built by `create_app` as `achilles api` builds it; nothing here reaches the
database, and the issuer is an address where nothing listens (the provider is down).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from achilles.api.app import create_app
from achilles.api.settings import load_settings
from achilles.db.database import Database
from achilles_dev.ports import free_port

PUBLIC_URL = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = load_settings(
        {
            "ACHILLES_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
            "ACHILLES_API_OIDC_ISSUER": f"http://127.0.0.1:{free_port()}",
            "ACHILLES_API_OIDC_AUDIENCE": "achilles-api",
            "ACHILLES_API_WEB_CLIENT_ID": "achilles-web",
            "ACHILLES_API_WEB_CLIENT_SECRET": "client-secret",
            "ACHILLES_API_PUBLIC_URL": PUBLIC_URL,
            "ACHILLES_API_SESSION_SECRET": "s" * 48,
        }
    )
    database = Database(settings.database_url)
    # No `with`: the app's lifespan (the events hub's database connection) never starts.
    yield TestClient(create_app(settings, database), base_url=PUBLIC_URL)
    database.dispose()


def test_sign_in_with_the_provider_down_is_a_503_page(client: TestClient) -> None:
    response = client.get("/auth/login", follow_redirects=False)
    assert response.status_code == 503
    assert response.headers["content-type"].startswith("text/html")
    assert "cannot be reached" in response.text
    assert "Traceback" not in response.text
    assert "unsafe-inline" not in response.headers["content-security-policy"]


def test_a_provider_error_on_the_callback_is_a_400_page_with_the_reason_escaped(
    client: TestClient,
) -> None:
    response = client.get("/auth/callback", params={"error": "<script>x</script>", "state": "s"})
    assert response.status_code == 400
    assert "&lt;script&gt;x&lt;/script&gt;" in response.text
    assert "<script>" not in response.text
    assert "achilles_session" not in response.headers.get("set-cookie", "")


def test_page_headers_only_on_the_web_paths(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert "Sign in" in page.text  # no session: the sign-in page
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert client.head("/").status_code == 200
    script = client.get("/static/inbox.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "content-security-policy" in script.headers
    # The JSON API keeps FastAPI's defaults; /docs has a policy of its own (docs_page.py).
    assert "content-security-policy" not in client.get("/openapi.json").headers


def test_bearer_callers_get_no_csrf_cookie(client: TestClient) -> None:
    client.cookies.clear()
    browser = client.get("/healthz")
    assert "achilles_csrf=" in browser.headers.get("set-cookie", "")
    client.cookies.clear()
    portal = client.get("/healthz", headers={"Authorization": "Bearer not-a-token"})
    assert "set-cookie" not in portal.headers
