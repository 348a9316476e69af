"""Token verification of `achilles bench api`: `OidcVerifier` in-process with a real
token of the stack's OIDC provider (keys cached), beside its ceiling, the RS256
signature check alone.
"""

from __future__ import annotations

import jwt
from jwt.algorithms import RSAAlgorithm
from jwt.utils import base64url_decode

from achilles.api.identity.caller import issuer_of
from achilles.api.identity.oidc import OidcVerifier
from achilles_dev import oidc
from bench.api_data import Sizes
from bench.report import Report, at_most
from bench.sql import timed


def measure_tokens(
    report: Report, provider: oidc.RunningProvider, token: str, sizes: Sizes
) -> None:
    verifier = OidcVerifier(
        provider.issuer, provider.settings.api_audience, oidc.USER_CLAIM, ["RS256"]
    )

    def verify(checker: OidcVerifier) -> str:
        if issuer_of(token) != checker.issuer:  # the caller's choice of verifier, too
            raise RuntimeError("the provider's token names another issuer")
        return checker.user_key_of(token)

    verify(verifier)  # fetches discovery and the key set once: cached from here on
    # A verifier remembers tokens it verified: a fresh one (sharing the cached key set)
    # per sample checks the token in full, as on its first request.
    fresh = [
        OidcVerifier(
            provider.issuer,
            provider.settings.api_audience,
            oidc.USER_CLAIM,
            ["RS256"],
            keys=verifier.keys,
        )
        for _ in range(sizes.token_samples)
    ]
    report.latency(
        "token verification (JWKS cached)",
        [timed(verify, checker)[0] for checker in fresh],
        goal=at_most(1, "ms"),
        note="issuer_of + OidcVerifier.user_key_of on a real RS256 access token of the "
        "provider, the token not seen before: header, key lookup, signature, "
        "iss/aud/exp/nbf/iat, the user claim",
    )
    report.latency(
        "token verification: a token seen before",
        [timed(verify, verifier)[0] for _ in range(sizes.token_samples)],
        note="the verifier's memory of tokens it verified (SHA-256 of the token, the key "
        "still the issuer's; exp/nbf/iat checked on every use): a portal's or script's "
        "repeated token",
    )
    header = jwt.get_unverified_header(token)
    key = verifier.keys.key(header["kid"])
    if key is None:
        raise RuntimeError("the provider's key is not in its key set")
    signing_input, _, signature = token.rpartition(".")
    raw_signature = base64url_decode(signature)
    algorithm = RSAAlgorithm(RSAAlgorithm.SHA256)

    def signature_only() -> bool:
        return algorithm.verify(signing_input.encode(), key.key, raw_signature)

    if not signature_only():
        raise RuntimeError("the token's signature does not verify")
    report.latency(
        "token verification: ceiling (the RS256 signature check alone)",
        [timed(signature_only)[0] for _ in range(sizes.token_samples)],
    )
