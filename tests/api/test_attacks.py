"""The attack table of issue 19: every forged, stale or misdirected credential, and every
header that claims an identity, is refused with a problem document, and nothing is
written (the whole database is unchanged and no run was requested).

Every row aims at a write (`POST /v1/agents/team/helper/runs` of alice's agent) that a
valid token of alice's would perform. Tokens are the real provider's (`oidc_provider`);
forgeries are made from them, or signed with throwaway keys of our own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import Engine

from achilles.api.app import create_app
from achilles.api.identity.caller import Authenticator
from achilles.api.identity.oidc import OidcVerifier
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from tests.api.conftest import ServedApi, Tokens
from tests.api.support import (
    RecordingRunRequester,
    assert_problem,
    bearer,
    database_snapshot,
    make_cr_agent,
    served,
)
from tests.oidc_provider import OidcProvider

TARGET = "/v1/agents/team/helper/runs"
HOURS = 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _parts(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    header, payload, signature = token.split(".")
    return _json_part(header), _json_part(payload), signature


def _json_part(part: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return decoded


def _encoded(part: dict[str, Any]) -> str:
    return _b64(json.dumps(part, separators=(",", ":")).encode())


def _assemble(header: dict[str, Any], payload: dict[str, Any], signature: str) -> str:
    return f"{_encoded(header)}.{_encoded(payload)}.{signature}"


def alg_none(real: str, provider: OidcProvider) -> str:
    header, payload, _ = _parts(real)
    return _assemble({**header, "alg": "none"}, payload, "")


def hs256_with_public_key(real: str, provider: OidcProvider) -> str:
    """The classic confusion: HMAC "signed" with the issuer's public key (which anyone can
    fetch), hoping the verifier uses the key's bytes as the HMAC secret."""
    header, payload, _ = _parts(real)
    jwk = httpx.get(provider.jwks_uri, timeout=10).json()["keys"][0]
    public_pem = jwt.PyJWK(jwk).key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    forged = {**header, "alg": "HS256"}
    signing_input = _assemble(forged, payload, "").rstrip(".")
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


def tampered_payload(real: str, provider: OidcProvider) -> str:
    """Bob's real token with its payload changed to name alice; bob's signature kept."""
    header, payload, signature = _parts(real)
    return _assemble(header, {**payload, "sub": "alice"}, signature)


_THROWAWAY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _own_key_token(payload: dict[str, Any], kid: str) -> str:
    return jwt.encode(payload, _THROWAWAY, algorithm="RS256", headers={"kid": kid})


def key_not_in_jwks(real: str, provider: OidcProvider) -> str:
    _, payload, _ = _parts(real)
    return _own_key_token({**payload, "sub": "alice"}, "not-a-key-of-the-issuer")


def own_key_under_issuers_kid(real: str, provider: OidcProvider) -> str:
    header, payload, _ = _parts(real)
    return _own_key_token({**payload, "sub": "alice"}, header["kid"])


def no_exp(real: str, provider: OidcProvider) -> str:
    header, payload, signature = _parts(real)
    return _assemble(header, {k: v for k, v in payload.items() if k != "exp"}, signature)


Headers = Callable[[str, str, OidcProvider], dict[str, str]]


@dataclass(frozen=True)
class Attack:
    name: str
    status: int
    # The request's headers, from (alice's real token, bob's real token, the provider).
    headers: Headers
    app: str = "main"  # which served app: see `apps`
    detail: str = ""  # a phrase the problem's detail must hold


def alices(a: str, b: str, p: OidcProvider) -> dict[str, str]:
    return bearer(a)


def forged(forge: Callable[[str, OidcProvider], str], whose: str = "alice") -> Headers:
    return lambda a, b, p: bearer(forge(a if whose == "alice" else b, p))


def headers(values: dict[str, str], *, as_bob: bool = False) -> Headers:
    return lambda a, b, p: {**(bearer(b) if as_bob else {}), **values}


CLAIMING_ALICE = {
    "X-Forwarded-User": "alice",
    "X-Remote-User": "alice",
    "X-Remote-Group": "system:masters",
    "X-Auth-Request-User": "alice",
}

ATTACKS = [
    Attack("no token", 401, headers({}), detail="no credentials"),
    Attack("bearer without a token", 401, headers({"Authorization": "Bearer"})),
    Attack("basic scheme", 401, headers({"Authorization": "Basic YWxpY2U6eA=="})),
    Attack("not a JWT", 401, headers({"Authorization": "Bearer garbage"})),
    Attack("expired", 401, alices, app="two hours later", detail="expired"),
    Attack("not yet valid", 401, alices, app="an hour ago", detail="not valid yet"),
    Attack("wrong audience", 401, alices, app="other audience", detail="aud"),
    Attack("wrong issuer", 401, alices, app="other issuer"),
    Attack("alg none", 401, forged(alg_none), detail="algorithm"),
    Attack("HS256 with the public key", 401, forged(hs256_with_public_key), detail="algorithm"),
    Attack("tampered payload", 401, forged(tampered_payload, "bob"), detail="signature"),
    Attack("key not in the JWKS", 401, forged(key_not_in_jwks), detail="not signed"),
    Attack("own key, issuer's kid", 401, forged(own_key_under_issuers_kid), detail="signature"),
    Attack("exp removed", 401, forged(no_exp), detail="signature"),
    Attack("identity headers alone", 401, headers(CLAIMING_ALICE)),
    Attack("bob with identity headers", 404, headers(CLAIMING_ALICE, as_bob=True)),
    Attack(
        "bob impersonating alice (OIDC)",
        403,
        headers({"Impersonate-User": "alice"}, as_bob=True),
        detail="Impersonate-User",
    ),
]


@pytest.fixture(scope="module")
def apps(
    api_settings: ApiSettings, api_database: Database, oidc_provider: OidcProvider
) -> Iterator[dict[str, tuple[str, RecordingRunRequester]]]:
    """The main app and apps whose verifier differs in one respect, each served."""

    def verifier(**overrides: Any) -> OidcVerifier:
        fields: dict[str, Any] = {
            "issuer": oidc_provider.issuer,
            "audience": oidc_provider.audience,
            "user_claim": oidc_provider.user_claim,
            "algorithms": ("RS256",),
            **overrides,
        }
        return OidcVerifier(**fields)

    variants = {
        "main": verifier(),
        "two hours later": verifier(clock=lambda: time.time() + 2 * HOURS),
        "an hour ago": verifier(clock=lambda: time.time() - HOURS),
        "other audience": verifier(audience="someone-elses-api"),
        # The same provider under another spelling: its tokens' iss is not this issuer.
        "other issuer": verifier(issuer=oidc_provider.issuer.replace("127.0.0.1", "localhost")),
    }
    served_apps: dict[str, tuple[str, RecordingRunRequester]] = {}
    with _serve_all(api_settings, api_database, variants, served_apps):
        yield served_apps


class _serve_all:
    def __init__(
        self,
        settings: ApiSettings,
        database: Database,
        variants: dict[str, OidcVerifier],
        into: dict[str, tuple[str, RecordingRunRequester]],
    ) -> None:
        self.settings, self.database, self.variants, self.into = settings, database, variants, into
        self._servers: list[Any] = []

    def __enter__(self) -> None:
        for name, verifier in self.variants.items():
            requester = RecordingRunRequester()
            app = create_app(
                self.settings,
                self.database,
                authenticator=Authenticator(oidc=verifier, kubernetes=None),
                run_requester=requester,
            )
            server = served(app)
            self.into[name] = (server.__enter__(), requester)
            self._servers.append(server)

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            server.__exit__(None, None, None)


@pytest.mark.parametrize("attack", ATTACKS, ids=[attack.name for attack in ATTACKS])
def test_refused_and_nothing_written(
    attack: Attack,
    apps: dict[str, tuple[str, RecordingRunRequester]],
    tokens: Tokens,
    oidc_provider: OidcProvider,
    db: Engine,
) -> None:
    make_cr_agent(db, "alice", name="helper")
    make_cr_agent(db, "bob", name="bobs")
    url, requester = apps[attack.app]
    headers = attack.headers(tokens("alice"), tokens("bob"), oidc_provider)
    before = database_snapshot(db)

    response = httpx.post(f"{url}{TARGET}", headers=headers, timeout=10)

    problem = assert_problem(response, attack.status)
    assert attack.detail in problem["detail"]
    if attack.status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert database_snapshot(db) == before
    assert requester.requests == []


def test_the_same_request_with_alices_real_token_writes(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    """The control row: the table's target is a write a valid token performs."""
    make_cr_agent(db, "alice", name="helper")
    response = httpx.post(f"{api.url}{TARGET}", headers=bearer(tokens("alice")), timeout=10)
    assert response.status_code == 202, response.text
    assert [(ns, name) for ns, name, _ in api.requester.requests] == [("team", "helper")]
    assert response.json()["request_key"] == api.requester.requests[0][2]
