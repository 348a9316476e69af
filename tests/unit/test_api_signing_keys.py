"""The OIDC verifier's key cache: an unknown `kid` refetches the issuer's key set (a
rotation), at most once per interval (a flood of made-up kids is not a flood of fetches),
and an issuer that cannot be reached is a 503, not a 401 blamed on the token.

The issuer here is a function returning documents, to drive the clock and the rotation
exactly; tests/api/test_attacks.py verifies the real provider's tokens."""

from __future__ import annotations

import time
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from achilles.api.identity.oidc import (
    LEEWAY_SECONDS,
    REFETCH_INTERVAL_SECONDS,
    JwksCache,
    OidcVerifier,
)
from achilles.api.problems import Problem

ISSUER = "http://issuer.test"
AUDIENCE = "achilles-api"


class Issuer:
    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.fetches: list[str] = []
        self.down = False

    def add_key(self, kid: str, key: Any) -> None:
        self.keys[kid] = key

    def fetch(self, url: str) -> Any:
        self.fetches.append(url)
        if self.down:
            raise httpx.ConnectError("connection refused")
        if url.endswith("/.well-known/openid-configuration"):
            return {"issuer": ISSUER, "jwks_uri": f"{ISSUER}/keys"}
        return {"keys": [_jwk(kid, key) for kid, key in self.keys.items()]}

    def token(self, kid: str, algorithm: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "nbf": now,
                   "exp": now + 600, **claims}  # fmt: skip
        return jwt.encode(payload, self.keys[kid], algorithm=algorithm, headers={"kid": kid})


def _jwk(kid: str, key: Any) -> dict[str, Any]:
    algorithm = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
    public: dict[str, Any] = jwt.get_algorithm_by_name(algorithm).to_jwk(
        key.public_key(), as_dict=True
    )
    return {**public, "kid": kid}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def issuer() -> Issuer:
    issuer = Issuer()
    issuer.add_key("one", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return issuer


def verifier(
    issuer: Issuer, clock: Clock, algorithms: tuple[str, ...] = ("RS256",)
) -> OidcVerifier:
    return OidcVerifier(ISSUER, AUDIENCE, "sub", algorithms, JwksCache(ISSUER, issuer.fetch, clock))


def test_keys_are_fetched_once_and_kept(issuer: Issuer) -> None:
    check = verifier(issuer, Clock())
    for _ in range(3):
        assert check.user_key_of(issuer.token("one")) == "alice"
    assert issuer.fetches == [f"{ISSUER}/.well-known/openid-configuration", f"{ISSUER}/keys"]


def test_a_rotated_key_is_fetched_then_unknown_kids_wait(issuer: Issuer) -> None:
    clock = Clock()
    check = verifier(issuer, clock)
    check.user_key_of(issuer.token("one"))
    clock.now += REFETCH_INTERVAL_SECONDS
    issuer.add_key("two", rsa.generate_private_key(public_exponent=65537, key_size=2048))

    assert check.user_key_of(issuer.token("two")) == "alice"  # the rotation: one refetch
    fetched = len(issuer.fetches)
    for kid in ("made-up-1", "made-up-2", "made-up-3"):
        with pytest.raises(Problem) as refused:
            check.user_key_of(
                jwt.encode({"sub": "alice"}, issuer.keys["one"], "RS256", {"kid": kid})
            )
        assert refused.value.status == 401
    assert len(issuer.fetches) == fetched  # within the interval: no fetch at all
    clock.now += REFETCH_INTERVAL_SECONDS
    with pytest.raises(Problem):
        check.user_key_of(
            jwt.encode({"sub": "x"}, issuer.keys["one"], "RS256", {"kid": "made-up-4"})
        )
    assert len(issuer.fetches) == fetched + 1  # one more after it


def test_an_unreachable_issuer_is_503_and_known_keys_keep_working(issuer: Issuer) -> None:
    clock = Clock()
    check = verifier(issuer, clock)
    check.user_key_of(issuer.token("one"))
    issuer.down = True
    clock.now += REFETCH_INTERVAL_SECONDS
    issuer.add_key("two", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    with pytest.raises(Problem) as unavailable:
        check.user_key_of(issuer.token("two"))
    assert unavailable.value.status == 503
    assert check.user_key_of(issuer.token("one")) == "alice"


def test_an_algorithm_must_match_the_keys_type(issuer: Issuer) -> None:
    """ES256 allowed, but the kid names an RSA key: refused before any verification."""
    issuer.add_key("ec", ec.generate_private_key(ec.SECP256R1()))
    check = verifier(issuer, Clock(), ("RS256", "ES256"))
    assert check.user_key_of(issuer.token("ec", algorithm="ES256")) == "alice"
    with pytest.raises(Problem) as refused:
        check.user_key_of(_header_swapped(issuer.token("ec", algorithm="ES256"), kid="one"))
    assert refused.value.status == 401


def _header_swapped(token: str, *, kid: str) -> str:
    import base64
    import json

    header, payload, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    new = base64.urlsafe_b64encode(json.dumps({**decoded, "kid": kid}).encode()).decode()
    return f"{new.rstrip('=')}.{payload}.{signature}"


@pytest.mark.parametrize(
    ("claims", "detail"),
    [
        ({"sub": "not a key!"}, "is not a user key"),
        ({"sub": 42}, "not valid"),
        ({"iat": "yesterday"}, "'iat' claim is not a time"),
        ({"aud": "someone-else"}, "aud"),
    ],
)
def test_claims_that_are_wrong(issuer: Issuer, claims: dict[str, Any], detail: str) -> None:
    with pytest.raises(Problem) as refused:
        verifier(issuer, Clock()).user_key_of(issuer.token("one", **claims))
    assert refused.value.status == 401
    assert detail in refused.value.detail


def test_a_token_seen_before_still_expires(issuer: Issuer) -> None:
    """The second use comes from the verifier's memory of the token; its times do not."""
    wall = Clock()
    wall.now = time.time()
    keys = JwksCache(ISSUER, issuer.fetch, Clock())
    check = OidcVerifier(ISSUER, AUDIENCE, "sub", ("RS256",), keys, clock=wall)
    token = issuer.token("one")
    assert check.user_key_of(token) == "alice"
    assert check.user_key_of(token) == "alice"
    wall.now += 600 + LEEWAY_SECONDS  # the token's exp, plus the leeway
    with pytest.raises(Problem) as expired:
        check.user_key_of(token)
    assert expired.value.status == 401
    assert "expired" in expired.value.detail


def test_a_token_seen_before_is_refused_once_its_key_left_the_key_set(issuer: Issuer) -> None:
    clock = Clock()
    check = verifier(issuer, clock)
    token = issuer.token("one")
    assert check.user_key_of(token) == "alice"
    clock.now += REFETCH_INTERVAL_SECONDS
    del issuer.keys["one"]
    issuer.add_key("two", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    assert check.user_key_of(issuer.token("two")) == "alice"  # the refetch: "one" is gone
    with pytest.raises(Problem) as refused:
        check.user_key_of(token)
    assert refused.value.status == 401
