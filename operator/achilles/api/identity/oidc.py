"""OIDC bearer tokens: JWTs verified in-process against the issuer's published keys.

The keys come from the issuer's JWKS (its `jwks_uri`, from OIDC discovery), fetched on
first use and kept as long as the issuer's `Cache-Control` says (`JwksCache`); a token
signed with a key id not in the set makes one refetch (the issuer rotated its keys), at
most once per `REFETCH_INTERVAL_SECONDS`, so a flood of made-up key ids cannot turn into
a flood of requests to the issuer, and no fetch ever holds the event loop.

A token is accepted only when all of these hold: its header's `alg` is one of the pinned
asymmetric algorithms (never `none`, never HS*: an HMAC "signed" with the public key is
the classic forgery) and is the algorithm family of the key its `kid` names; the signature
verifies; `iss` is the issuer, `aud` holds the audience; `exp`, `nbf` and `iat` are present
and `exp`/`nbf` hold (with `LEEWAY_SECONDS` of clock skew); the user claim is a valid user
key (`achilles.domain.users`); and it is an access token, not an ID token (issue 37): a
header `typ`, when there is one, is `JWT` or `at+jwt` (RFC 9068), and the claims carry
none of the ID token's own (`nonce`, `at_hash`, `c_hash`, `s_hash`: OIDC Core 2, 3.1.3.6);
an `azp` or `client_id`, when present, is one of `ACHILLES_API_OIDC_CLIENTS` if that is
set. An ID token says who signed in to a client; it was never meant for this API.

A token that verified is remembered (by its SHA-256) for `VERIFIED_SECONDS`: the same
bytes verify the same way while the key that verified them is still the issuer's key of
that `kid`, so a repeat costs a hash and the time checks, which run on every use.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
from jwt import PyJWK, PyJWKSet

from achilles.api.identity.cache import TtlCache
from achilles.api.identity.peek import CLAIMS, HEADER, unverified_part
from achilles.api.problems import unauthorized
from achilles.domain.users import is_valid_user_key

log = logging.getLogger("achilles.api")

REFETCH_INTERVAL_SECONDS = 10.0
# How long the issuer's key set is kept when its answer says nothing (Cache-Control), and
# at most whatever it says: a key it withdrew stops verifying within that time.
DEFAULT_KEYS_AGE_SECONDS = 300.0
MAX_KEYS_AGE_SECONDS = 86400.0
LEEWAY_SECONDS = 30
FETCH_TIMEOUT_SECONDS = 5.0
REQUIRED_CLAIMS = ("exp", "nbf", "iat", "iss", "aud")
# An access token's header `typ`, when it has one (RFC 9068 section 2.1; lower case).
ACCESS_TOKEN_TYPES = frozenset({"jwt", "at+jwt", "application/at+jwt"})
# Claims only an ID token carries (OIDC Core): their presence says what the token is.
ID_TOKEN_CLAIMS = ("nonce", "at_hash", "c_hash", "s_hash")
# The key type an algorithm family signs with: a token must not pick an algorithm the
# key its `kid` names was never meant for.
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC"}

Fetch = Callable[[str], Any]
# How long a verified token's answer is kept (its times are checked on every use):
# verifying it again cost about 0.2 ms of CPU per request (`achilles bench api`).
VERIFIED_SECONDS = 300.0


@dataclass(frozen=True)
class _Verified:
    """A token that verified: whom it names, and the key that verified it."""

    user_key: str
    kid: str
    key: PyJWK
    times: tuple[float, float, float]  # exp, nbf, iat


@dataclass(frozen=True)
class Fetched:
    """A document the issuer served, and how long it said to keep it (`max-age`)."""

    document: Any
    max_age: float | None = None


def _fetch_json(url: str) -> Fetched:
    response = httpx.get(url, timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False)
    response.raise_for_status()
    return Fetched(response.json(), _max_age(response.headers.get("cache-control")))


def _max_age(cache_control: str | None) -> float | None:
    """`max-age` of a Cache-Control header (0 for `no-store`/`no-cache`); None if absent."""
    if not cache_control:
        return None
    for directive in cache_control.lower().split(","):
        name, _, value = directive.strip().partition("=")
        if name in ("no-store", "no-cache"):
            return 0.0
        if name == "max-age" and value.strip().strip('"').isdigit():
            return float(value.strip().strip('"'))
    return None


class OidcUnavailable(Exception):
    """The issuer's discovery document or key set could not be fetched."""


class JwksCache:
    """The issuer's signing keys by `kid`, kept as long as the issuer says (its key set's
    `Cache-Control: max-age`, within [`REFETCH_INTERVAL_SECONDS`, `MAX_KEYS_AGE_SECONDS`];
    `DEFAULT_KEYS_AGE_SECONDS` when it says nothing), so a key it withdrew stops verifying
    once that time is up; refetched on an unknown `kid` (a rotation) or a stale set, at
    most once per `REFETCH_INTERVAL_SECONDS`.

    Nothing here makes the event loop wait: `cached` reads the current set without a
    lock (the set is replaced whole, never changed in place), and only `key`, called in
    a worker thread, fetches. One fetch at a time: a thread that finds a fetch under way
    answers from the keys it has, or waits for that fetch at most `FETCH_TIMEOUT_SECONDS`
    for a `kid` it does not know yet (a first sign-in, a rotation), then 503: a slow
    issuer holds no worker of the pool longer than that.
    """

    def __init__(
        self, issuer: str, fetch: Fetch = _fetch_json, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.issuer = issuer
        self._fetch = fetch
        self._clock = clock
        self._fetching = threading.Lock()  # held across a fetch, never waited for
        self._jwks_uri: str | None = None
        self._keys: dict[str, PyJWK] = {}
        self._fresh_until: float | None = None
        self._fetched_at: float | None = None
        self._failure: OidcUnavailable | None = None

    def _is_fresh(self) -> bool:
        return self._fresh_until is not None and self._clock() < self._fresh_until

    def cached(self, kid: str) -> PyJWK | None:
        """The key while the set is fresh (never fetches, never waits)."""
        return self._keys.get(kid) if self._is_fresh() else None

    def key(self, kid: str) -> PyJWK | None:
        """The key of `kid`, fetching the set when it is stale or lacks `kid` and the
        last fetch is older than the interval. Call from a thread."""
        keys = self._keys
        if kid in keys and self._is_fresh():
            return keys[kid]
        if kid in keys and self._fetching.locked():
            return keys[kid]  # stale, and another thread is fetching: no waiting for it
        if not self._fetching.acquire(timeout=FETCH_TIMEOUT_SECONDS):
            # A slow fetch under way: "try again" rather than hold this worker longer.
            raise OidcUnavailable("the issuer's keys are being fetched")
        try:
            return self._refresh(kid)
        finally:
            self._fetching.release()

    def _refresh(self, kid: str) -> PyJWK | None:
        now = self._clock()
        if self._fetched_at is not None and now - self._fetched_at < REFETCH_INTERVAL_SECONDS:
            if kid in self._keys:  # stale, but the issuer was asked a moment ago
                return self._keys[kid]
            if self._failure is not None:
                raise self._failure
            return None
        self._fetched_at = now
        try:
            keys, max_age = self._load()
        except OidcUnavailable as exc:
            log.warning("OIDC issuer %s: cannot fetch its keys: %s", self.issuer, exc)
            self._failure = exc
            if kid in self._keys:  # the issuer is away: the keys it last published
                return self._keys[kid]
            raise
        self._failure = None
        age = DEFAULT_KEYS_AGE_SECONDS if max_age is None else max_age
        self._keys = keys
        self._fresh_until = now + min(max(age, REFETCH_INTERVAL_SECONDS), MAX_KEYS_AGE_SECONDS)
        return keys.get(kid)

    def _load(self) -> tuple[dict[str, PyJWK], float | None]:
        try:
            if self._jwks_uri is None:
                discovery = _document(
                    self._fetch(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
                )
                self._jwks_uri = str(discovery.document["jwks_uri"])
            fetched = _document(self._fetch(self._jwks_uri))
            key_set = PyJWKSet.from_dict(fetched.document)
        except (httpx.HTTPError, KeyError, TypeError, ValueError, jwt.PyJWTError) as exc:
            raise OidcUnavailable(f"{type(exc).__name__}: {exc}") from exc
        keys = {
            key.key_id: key
            for key in key_set.keys
            if key.key_id is not None and key.public_key_use in (None, "sig")
        }
        return keys, fetched.max_age


def _document(fetched: Any) -> Fetched:
    """A fetch's answer: a `Fetched`, or a bare document (kept the default time)."""
    return fetched if isinstance(fetched, Fetched) else Fetched(fetched)


class OidcVerifier:
    """Verifies access tokens of one issuer for one audience."""

    def __init__(
        self,
        issuer: str,
        audience: str,
        user_claim: str,
        algorithms: Sequence[str],
        keys: JwksCache | None = None,
        clock: Callable[[], float] = time.time,
        *,
        clients: Sequence[str] = (),
        leeway: float = LEEWAY_SECONDS,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.user_claim = user_claim
        self.algorithms = tuple(algorithms)
        self.keys = keys or JwksCache(issuer)
        self.clock = clock  # wall clock (seconds since the epoch), as exp/nbf/iat count
        self.clients = frozenset(clients)
        self.leeway = leeway
        self._verified: TtlCache[bytes, _Verified] = TtlCache(VERIFIED_SECONDS)

    def user_key_of(self, token: str) -> str:
        return self.verified(token)[0]

    def verified(self, token: str) -> tuple[str, float]:
        """The token's user key and until when it verifies (its `exp` plus the leeway).
        A token verified before (the same bytes, by SHA-256) is not verified again while
        the key that verified it is still the issuer's key of that `kid`; its times are
        checked on every use."""
        digest = hashlib.sha256(token.encode()).digest()
        seen = self._verified.get(digest)
        if seen is not None and self.keys.cached(seen.kid) is seen.key:
            _check_window(seen.times, self.clock(), self.leeway)
            return seen.user_key, seen.times[0] + self.leeway
        claims, kid, key = self._verify(token)
        user_key = claims.get(self.user_claim)
        if not isinstance(user_key, str) or not is_valid_user_key(user_key):
            raise unauthorized(f"the bearer token's {self.user_claim!r} claim is not a user key")
        times = _times(claims)
        self._verified.put(digest, _Verified(user_key, kid, key, times))
        return user_key, times[0] + self.leeway

    def needs_keys_for(self, token: str) -> bool:
        """Whether `claims_of` would fetch the issuer's keys: a token of an accepted
        algorithm naming a key id not in the cached set (anything else is refused or
        verified without a fetch)."""
        header = unverified_part(token, HEADER)
        if header is None or header.get("alg") not in self.algorithms:
            return False
        kid = header.get("kid")
        return isinstance(kid, str) and bool(kid) and self.keys.cached(kid) is None

    def claims_of(self, token: str) -> dict[str, Any]:
        """The token's claims, verified (never from the cache of `user_key_of`)."""
        return self._verify(token)[0]

    def _verify(self, token: str) -> tuple[dict[str, Any], str, PyJWK]:
        # The header unverified, to pick the key; PyJWT's decode below reads it again,
        # verified with everything else.
        header = unverified_part(token, HEADER)
        if header is None:
            raise unauthorized("the bearer token is not a well-formed JWT")
        # Refusing needs no signature: a token that is no access token is refused first.
        self._refuse_other_token_kinds(header, unverified_part(token, CLAIMS) or {})
        algorithm = header.get("alg")
        if algorithm not in self.algorithms:
            raise unauthorized(
                f"the bearer token's algorithm {str(algorithm)[:20]!r} is not accepted"
                f" (accepted: {', '.join(self.algorithms)})"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise unauthorized("the bearer token names no signing key (no kid)")
        try:
            key = self.keys.key(kid)
        except OidcUnavailable as exc:
            raise _issuer_unavailable(exc) from None
        if key is None or key.key_type != _KEY_TYPES.get(str(algorithm)[:2]):
            raise unauthorized("the bearer token is not signed by a key of the issuer")
        claims = _decode(token, key, str(algorithm), self.issuer, self.audience)
        _check_window(_times(claims), self.clock(), self.leeway)
        self._refuse_other_token_kinds(header, claims)
        return claims, kid, key

    def _refuse_other_token_kinds(self, header: dict[str, Any], claims: dict[str, Any]) -> None:
        kind = header.get("typ")
        if kind is not None and str(kind).lower() not in ACCESS_TOKEN_TYPES:
            raise unauthorized(
                f"the bearer token's type {str(kind)[:30]!r} is not an access token's (typ)"
            )
        if any(name in claims for name in ID_TOKEN_CLAIMS):
            raise unauthorized("the bearer token is an ID token, not an access token")
        if self.clients:
            client = claims.get("azp", claims.get("client_id"))
            if not isinstance(client, str) or client not in self.clients:
                raise unauthorized(
                    "the bearer token was not issued to a client this API accepts (azp)"
                )


def _decode(token: str, key: PyJWK, algorithm: str, issuer: str, audience: str) -> dict[str, Any]:
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=[algorithm],
            audience=audience,
            issuer=issuer,
            # The times are checked below against the verifier's clock.
            options={
                "require": list(REQUIRED_CLAIMS),
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "strict_aud": False,
            },
        )
    except jwt.InvalidAudienceError:
        raise unauthorized("the bearer token is not meant for this API (aud)") from None
    except jwt.InvalidIssuerError:
        raise unauthorized("the bearer token is from another issuer (iss)") from None
    except jwt.MissingRequiredClaimError as exc:
        raise unauthorized(f"the bearer token has no {exc.claim!r} claim") from None
    except jwt.InvalidSignatureError:
        raise unauthorized("the bearer token's signature does not verify") from None
    except jwt.PyJWTError:
        raise unauthorized("the bearer token is not valid") from None
    return claims


def _times(claims: dict[str, Any]) -> tuple[float, float, float]:
    """`exp`, `nbf`, `iat`."""
    times: list[float] = []
    for name in ("exp", "nbf", "iat"):
        value = claims.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise unauthorized(f"the bearer token's {name!r} claim is not a time")
        times.append(float(value))
    return times[0], times[1], times[2]


def _check_window(
    times: tuple[float, float, float], now: float, leeway: float = LEEWAY_SECONDS
) -> None:
    expires, not_before, issued = times
    if now >= expires + leeway:
        raise unauthorized("the bearer token has expired")
    if now + leeway < max(not_before, issued):
        raise unauthorized("the bearer token is not valid yet (nbf/iat in the future)")


def _issuer_unavailable(exc: OidcUnavailable) -> Exception:
    from achilles.api.problems import Problem

    return Problem(
        503,
        "the identity provider's signing keys cannot be fetched right now; try again",
        headers={"Retry-After": str(int(REFETCH_INTERVAL_SECONDS))},
    )
