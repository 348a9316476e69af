"""The API's OpenAPI document as its clients (the portal, the web inbox) read it, built by
`create_app` without serving it: every resource's routes are in it (app.py's static
router list), each list answers with a page under the name clients know, and the owner
scope is one parameter (issue 40 item 3)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from achilles.api.app import create_app
from achilles.api.settings import ApiSettings
from achilles.db.database import Database

# Never connected to: building the app and its document reads no database.
NOWHERE = "postgresql+psycopg://nobody@127.0.0.1:1/none"


class _NoRuns:
    def request(self, namespace: str, name: str, at: datetime) -> str:
        raise AssertionError("not called")

    def cancel(self, namespace: str, name: str, run_id: int) -> str:
        raise AssertionError("not called")


def _document() -> dict[str, Any]:
    settings = ApiSettings(
        database_url=NOWHERE,
        oidc_issuer="https://issuer.example",
        oidc_audience="achilles",
        oidc_user_claim="sub",
    )
    database = Database(NOWHERE, pool_size=1)
    try:
        app = create_app(settings, database, run_requester=_NoRuns())
        return app.openapi()
    finally:
        database.dispose()


def test_every_resource_is_served_and_each_list_is_a_page_under_its_name() -> None:
    document = _document()
    paths = document["paths"]
    assert set(paths) == {
        "/healthz",
        "/readyz",
        "/v1/me",
        "/v1/agents",
        "/v1/agents/{namespace}/{name}/runs",
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/steps",
        "/v1/runs/{run_id}/cancel",
        "/v1/inbox",
        "/v1/inbox/{item_id}",
        "/v1/inbox/{item_id}/reply",
        "/v1/inbox/{item_id}/approval",
        "/v1/events",
    }
    schemas = document["components"]["schemas"]
    for path, page, item in (
        ("/v1/agents", "AgentPage", "AgentDocument"),
        ("/v1/runs", "RunPage", "RunSummary"),
        ("/v1/inbox", "InboxPage", "ListedItemOut"),
    ):
        answer = paths[path]["get"]["responses"]["200"]["content"]["application/json"]
        assert answer["schema"] == {"$ref": f"#/components/schemas/{page}"}, path
        shape = schemas[page]
        assert shape["required"] == ["items", "next_cursor"]
        assert shape["properties"]["items"]["items"] == {"$ref": f"#/components/schemas/{item}"}
        assert shape["properties"]["next_cursor"]["description"]


def test_the_owner_scope_is_one_query_parameter_of_each_list() -> None:
    paths = _document()["paths"]
    for path in ("/v1/agents", "/v1/runs", "/v1/inbox"):
        owners = [p for p in paths[path]["get"]["parameters"] if p["name"] == "owner"]
        assert len(owners) == 1, path
        assert owners[0]["in"] == "query"
        assert owners[0]["schema"]["anyOf"][0]["maxLength"] == 254
