"""`/docs` in a real browser (issue 37, item 8): Swagger UI comes from the API itself, not
a CDN, and works under a Content-Security-Policy that allows scripts and styles from the
page's origin only; the browser asks no other host for anything and reports no policy
violation.
"""

from __future__ import annotations

import httpx
from playwright.sync_api import ConsoleMessage, Page, expect

from tests.web.conftest import WebServer


def test_the_docs_page_loads_nothing_from_elsewhere_under_its_policy(
    web_server: WebServer, page: Page
) -> None:
    requested: list[str] = []
    violations: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Refused to" in message.text:
            violations.append(message.text)

    page.on("console", on_console)
    page.goto(f"{web_server.url}/docs")

    # Swagger UI ran: it read /openapi.json and shows the API's operations.
    expect(page.get_by_text("/v1/me", exact=True).first).to_be_visible()
    expect(page.locator(".opblock").first).to_be_visible()
    assert [url for url in requested if not url.startswith(web_server.url)] == []
    assert violations == []

    headers = httpx.get(f"{web_server.url}/docs", timeout=10).headers
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    asset = httpx.get(f"{web_server.url}/docs/swagger/swagger-ui-bundle.js", timeout=10)
    assert asset.status_code == 200
    assert asset.headers["content-security-policy"] == policy
