"""The dev and test OpenID Provider, started for real (the `oidc_provider` fixture).

It must serve what the API relies on (discovery, JWKS, RS256 JWT access tokens with the
configured `iss`, `aud` and the user key in `sub`, got through the real sign-in flow),
and refuse what it must: a wrong password, a malformed user key, a wrong client secret,
an unregistered redirect URI, the example OP's built-in demo service user.
"""

from __future__ import annotations

from typing import Any

import httpx
import jwt
import pytest

from achilles_dev import oidc
from tests.oidc_provider import OidcProvider


def _verified_claims(provider: OidcProvider, token: str) -> dict[str, Any]:
    signing_key = jwt.PyJWKClient(provider.jwks_uri).get_signing_key_from_jwt(token)
    claims: dict[str, Any] = jwt.decode(
        token,
        signing_key.key,
        algorithms=["RS256"],
        audience=provider.audience,
        issuer=provider.issuer,
        options={"require": ["exp", "iat", "nbf", "iss", "aud", "sub"]},
    )
    return claims


def test_discovery_and_jwks_are_served(oidc_provider: OidcProvider) -> None:
    document = httpx.get(oidc_provider.discovery_url).raise_for_status().json()
    assert document["issuer"] == oidc_provider.issuer
    assert document["jwks_uri"] == oidc_provider.jwks_uri
    assert "S256" in document["code_challenge_methods_supported"]
    assert "code" in document["response_types_supported"]
    assert document["token_endpoint"].startswith(f"{oidc_provider.issuer}/")
    keys = httpx.get(oidc_provider.jwks_uri).raise_for_status().json()["keys"]
    assert [(key["kty"], key["alg"], key["use"]) for key in keys] == [("RSA", "RS256", "sig")]
    assert keys[0]["kid"]


@pytest.mark.parametrize("user_key", ["alice", "a.b+c_d-e@example.org", "7" * 253])
def test_token_for_gives_a_verifiable_jwt_naming_the_user(
    oidc_provider: OidcProvider, user_key: str
) -> None:
    token = oidc_provider.token_for(user_key)
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    claims = _verified_claims(oidc_provider, token)
    assert claims[oidc_provider.user_claim] == user_key
    assert claims["aud"] == [oidc_provider.cli_client_id, oidc_provider.audience]
    assert claims["client_id"] == oidc_provider.cli_client_id


def test_web_client_signs_in_on_any_loopback_port(oidc_provider: OidcProvider) -> None:
    token = oidc.token_for(
        oidc_provider.issuer,
        "bob",
        password=oidc_provider.login_password,
        client_id=oidc_provider.web_client_id,
        client_secret=oidc_provider.web_client_secret,
        redirect_uri="http://127.0.0.1:43123/auth/callback",
    )
    claims = _verified_claims(oidc_provider, token)
    assert claims["sub"] == "bob"
    assert claims["aud"] == [oidc_provider.web_client_id, oidc_provider.audience]


def test_wrong_password_is_refused(oidc_provider: OidcProvider) -> None:
    with pytest.raises(oidc.SignInRefused, match="username or password wrong"):
        oidc.token_for(oidc_provider.issuer, "alice", password="not-the-dev-password")


@pytest.mark.parametrize("user_key", ["-alice", "al ice", "ålice\n", "a" * 254])
def test_malformed_user_key_is_refused(oidc_provider: OidcProvider, user_key: str) -> None:
    with pytest.raises(oidc.SignInRefused, match="not an Achilles user key"):
        oidc.token_for(oidc_provider.issuer, user_key, password=oidc_provider.login_password)


def test_wrong_client_secret_is_refused(oidc_provider: OidcProvider) -> None:
    with pytest.raises(oidc.OidcFlowError, match="token endpoint answered HTTP 401"):
        oidc.token_for(
            oidc_provider.issuer,
            "alice",
            password=oidc_provider.login_password,
            client_id=oidc_provider.web_client_id,
            client_secret="not-the-secret",
            redirect_uri="http://localhost:8080/auth/callback",
        )


def test_unregistered_redirect_uri_is_refused(oidc_provider: OidcProvider) -> None:
    with pytest.raises(oidc.OidcFlowError, match="authorize: expected a redirect"):
        oidc.token_for(
            oidc_provider.issuer,
            "alice",
            password=oidc_provider.login_password,
            client_id=oidc_provider.web_client_id,
            client_secret=oidc_provider.web_client_secret,
            redirect_uri="http://attacker.example:8080/auth/callback",
        )


def test_example_demo_service_user_is_refused(oidc_provider: OidcProvider) -> None:
    """The example OP's storage ships a client-credentials user `sid1`/`verysecret`."""
    document = httpx.get(oidc_provider.discovery_url).json()
    response = httpx.post(
        document["token_endpoint"],
        data={"grant_type": "client_credentials", "scope": "openid"},
        auth=("sid1", "verysecret"),
    )
    assert response.status_code in (400, 401)
    assert "access_token" not in response.text
