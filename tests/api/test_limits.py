"""Rate limits and stream caps (issue 37, items 4 and 5), through a real uvicorn, the real
OIDC provider and PostgreSQL: a person beyond their limit, a client address that failed
to sign in too often, and a person holding too many event streams get `429` with
`Retry-After`; someone else is not held up by them.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack

import httpx
import pytest
from sqlalchemy import Engine

from achilles.api.app import create_app
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from tests.api.conftest import Tokens
from tests.api.support import RecordingRunRequester, assert_problem, bearer, served
from tests.db.factories import make_owner
from tests.oidc_provider import OidcProvider


def _limited(api_settings: ApiSettings, database: Database, **limits: object) -> Iterator[str]:
    settings = api_settings.model_copy(update=limits)
    with served(create_app(settings, database, run_requester=RecordingRunRequester())) as url:
        yield url


@pytest.fixture
def tight(api_settings: ApiSettings, api_database: Database, db: Engine) -> Iterator[str]:
    """The API with small limits: 5 requests a minute a person, 3 failed sign-ins a
    minute an address, 2 event streams a person."""
    yield from _limited(
        api_settings,
        api_database,
        rate_limit_user="5/minute",
        auth_failure_limit="3/minute",
        max_streams_per_user=2,
    )


def _retry_after(response: httpx.Response) -> int:
    problem = assert_problem(response, 429)
    assert problem["type"].endswith("/rate-limited")
    seconds = int(response.headers["retry-after"])
    assert 1 <= seconds <= 60
    return seconds


def test_a_person_beyond_their_limit_gets_429_and_others_do_not(
    tight: str, tokens: Tokens, db: Engine
) -> None:
    make_owner(db, "alice")
    make_owner(db, "bob")
    alice, bob = bearer(tokens("alice")), bearer(tokens("bob"))
    answers = [httpx.get(f"{tight}/v1/me", headers=alice, timeout=10) for _ in range(6)]
    assert [answer.status_code for answer in answers[:5]] == [200] * 5
    _retry_after(answers[5])
    assert httpx.get(f"{tight}/v1/me", headers=bob, timeout=10).status_code == 200


def _made_up_token(issuer: str) -> str:
    """A token of the issuer naming a key it never had: checking it costs a fetch of
    the issuer's keys (a TokenReview, for a token not of the issuer)."""

    def part(value: Mapping[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    header = {"alg": "RS256", "kid": f"made-up-{uuid.uuid4().hex}"}
    claims = {"iss": issuer, "sub": "x", "aud": "achilles-api", "exp": int(time.time()) + 60}
    return f"{part(header)}.{part(claims)}.c2ln"


def test_an_address_that_failed_to_sign_in_too_often_costs_no_more_checks(
    tight: str, oidc_provider: OidcProvider, tokens: Tokens, db: Engine
) -> None:
    make_owner(db, "alice")
    failures = [
        httpx.get(
            f"{tight}/v1/me", headers=bearer(_made_up_token(oidc_provider.issuer)), timeout=10
        )
        for _ in range(3)
    ]
    assert [failure.status_code for failure in failures] == [401] * 3
    refused = httpx.get(
        f"{tight}/v1/me", headers=bearer(_made_up_token(oidc_provider.issuer)), timeout=10
    )
    _retry_after(refused)
    # A token checked without a network call still is: the person is not locked out.
    alice = httpx.get(f"{tight}/v1/me", headers=bearer(tokens("alice")), timeout=10)
    assert alice.status_code == 200


def test_a_person_holds_a_bounded_number_of_event_streams(
    tight: str, tokens: Tokens, db: Engine
) -> None:
    make_owner(db, "carol")
    make_owner(db, "dave")
    carol = bearer(tokens("carol"))
    with ExitStack() as streams:
        for _ in range(2):
            stream = streams.enter_context(
                httpx.stream("GET", f"{tight}/v1/events", headers=carol, timeout=10)
            )
            assert stream.status_code == 200
        third = httpx.get(f"{tight}/v1/events", headers=carol, timeout=10)
        _retry_after(third)
        with httpx.stream(
            "GET", f"{tight}/v1/events", headers=bearer(tokens("dave")), timeout=10
        ) as other:
            assert other.status_code == 200


def test_an_address_beyond_its_limit_gets_429(
    api_settings: ApiSettings, api_database: Database, db: Engine
) -> None:
    for url in _limited(api_settings, api_database, rate_limit_client="3/minute"):
        answers = [httpx.get(f"{url}/v1/me", timeout=10) for _ in range(4)]
        assert [answer.status_code for answer in answers[:3]] == [401] * 3
        _retry_after(answers[3])
        assert answers[3].headers["cache-control"] == "no-store"
