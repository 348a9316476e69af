"""The API tier: apps built by `create_app` on the session's real PostgreSQL, served by a
real uvicorn, callers signed in at the real OIDC provider (`oidc_provider`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine

from achilles.api.app import create_app
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from tests.api.support import RecordingRunRequester, served
from tests.oidc_provider import OidcProvider


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/api/" in str(item.fspath):
            item.add_marker(pytest.mark.db)


class Tokens:
    """Real access tokens of the provider, one sign-in per user key per session."""

    def __init__(self, provider: OidcProvider) -> None:
        self.provider = provider
        self._tokens: dict[str, str] = {}

    def __call__(self, user_key: str) -> str:
        if user_key not in self._tokens:
            self._tokens[user_key] = self.provider.token_for(user_key)
        return self._tokens[user_key]


@pytest.fixture(scope="package")
def tokens(oidc_provider: OidcProvider) -> Tokens:
    return Tokens(oidc_provider)


@pytest.fixture(scope="package")
def api_settings(database_url: str, oidc_provider: OidcProvider) -> ApiSettings:
    return ApiSettings(
        database_url=database_url,
        oidc_issuer=oidc_provider.issuer,
        oidc_audience=oidc_provider.audience,
        oidc_user_claim=oidc_provider.user_claim,
    )


@pytest.fixture(scope="package")
def api_database(database_url: str) -> Iterator[Database]:
    database = Database(database_url, pool_size=5, application_name="achilles-api-tests")
    yield database
    database.dispose()


@dataclass
class ServedApi:
    url: str
    requester: RecordingRunRequester


@pytest.fixture(scope="package")
def served_api(api_settings: ApiSettings, api_database: Database) -> Iterator[ServedApi]:
    requester = RecordingRunRequester()
    app = create_app(api_settings, api_database, run_requester=requester)
    with served(app) as url:
        yield ServedApi(url, requester)


@pytest.fixture
def api(served_api: ServedApi, db: Engine) -> ServedApi:
    """The session's served API over an emptied database, with no run requests yet."""
    served_api.requester.requests.clear()
    return served_api
