"""Kubernetes identities: the portal's ServiceAccount tokens, impersonation, admins.

- A bearer token that is not the OIDC issuer's is given to the API server's TokenReview
  for `ACHILLES_API_KUBE_AUDIENCE`: a token minted for another audience (or the default
  API audience) is refused, so a token the portal uses elsewhere cannot be replayed here.
  Only ServiceAccounts (`system:serviceaccount:...`) are accepted this way.
- A ServiceAccount acts only for a person it names in `Impersonate-User: <user key>`,
  and only where a SubjectAccessReview says it may `impersonate` `users` of that name,
  the grant the API server itself checks for impersonation. Without the header, or
  without the grant: 403.
- A person is an admin (reads every owner's data) when a SubjectAccessReview says user
  `<ACHILLES_API_KUBE_USER_PREFIX><user key>` (default `oidc:`, the prefix clusters give
  OIDC users) may `get` resource `ownerdata` of API group `achilles.io`, cluster-wide:
  grant it with a ClusterRole bound to that user (docs/api.md#admins). Acting on another
  owner's run (a cancel) asks a second review, of `update` on `ownerdata`: a read grant
  never writes.

Answers are cached for `CACHE_SECONDS` (token reviews both ways, keyed by the token's
hash; access reviews both ways), so a busy portal costs the API server one review per
token and user every few seconds; a revoked grant takes effect within that time.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

from achilles.api.identity.cache import TtlCache
from achilles.api.problems import Problem, unauthorized
from achilles.domain.users import USER_KEY_RULE, is_valid_user_key
from achilles.errors import ClusterUnavailable
from achilles.k8s.reviews import Access, ReviewedUser, Reviews

if TYPE_CHECKING:
    from achilles.api.settings import ApiSettings

log = logging.getLogger("achilles.api")

CACHE_SECONDS = 10.0
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
ADMIN_ACCESS = Access(verb="get", resource="ownerdata", group="achilles.io")
# Acting on another owner's objects (cancelling their run) is a write: reading them is
# not enough (issue 37).
ADMIN_WRITE_ACCESS = Access(verb="update", resource="ownerdata", group="achilles.io")


def impersonation_of(user_key: str) -> Access:
    return Access(verb="impersonate", resource="users", group="", name=user_key)


class KubernetesIdentity:
    def __init__(self, reviews: Reviews, audience: str, user_prefix: str) -> None:
        self.reviews = reviews
        self.audience = audience
        self.user_prefix = user_prefix
        self._tokens: TtlCache[str, ReviewedUser] = TtlCache(CACHE_SECONDS)
        # Tokens the API server refused, by hash: a client repeating one costs no review
        # (issue 37; the address's failed sign-ins are limited too, `api/throttle.py`).
        self._refused: TtlCache[str, bool] = TtlCache(CACHE_SECONDS)
        self._access: TtlCache[tuple[str, tuple[str, ...], Access], bool] = TtlCache(CACHE_SECONDS)

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> KubernetesIdentity:
        assert settings.kube_audience is not None
        return cls(
            Reviews(settings.kubeconfig_path), settings.kube_audience, settings.kube_user_prefix
        )

    def user_key_for(self, token: str, impersonate: str | None) -> str:
        account = self._service_account(token)
        if impersonate is None:
            raise Problem(
                403,
                "a ServiceAccount acts only for a person: send Impersonate-User: <user key>",
            )
        if not is_valid_user_key(impersonate):
            raise Problem(400, f"Impersonate-User: {USER_KEY_RULE}")
        if not self._may(account, impersonation_of(impersonate)):
            raise Problem(
                403,
                f"ServiceAccount {account.username.removeprefix(SERVICE_ACCOUNT_PREFIX)}"
                f" may not impersonate user {impersonate!r} (RBAC: verb impersonate on"
                " resource users)",
            )
        return impersonate

    def is_admin(self, user_key: str) -> bool:
        """Fails closed: when the API server cannot answer, the caller is no admin (and
        reads only their own data) rather than every request failing."""
        person = ReviewedUser(username=f"{self.user_prefix}{user_key}", uid="", groups=())
        try:
            return self._may(person, ADMIN_ACCESS)
        except ClusterUnavailable as exc:
            log.warning("admin check for %s: %s; treated as no admin", user_key, exc)
            return False

    def may_write_for_others(self, user_key: str) -> bool:
        """Whether the person may act on other owners' objects (`update` on `ownerdata`);
        fails closed like `is_admin`."""
        person = ReviewedUser(username=f"{self.user_prefix}{user_key}", uid="", groups=())
        try:
            return self._may(person, ADMIN_WRITE_ACCESS)
        except ClusterUnavailable as exc:
            log.warning("admin write check for %s: %s; treated as no grant", user_key, exc)
            return False

    def cached_admin(self, user_key: str) -> bool | None:
        """`is_admin`'s answer while it is cached (None: `is_admin` asks the API server)."""
        return self._access.get((f"{self.user_prefix}{user_key}", (), ADMIN_ACCESS))

    def _service_account(self, token: str) -> ReviewedUser:
        digest = hashlib.sha256(token.encode()).hexdigest()
        user = self._tokens.get(digest)
        if user is None:
            if self._refused.get(digest):
                raise unauthorized("the bearer token is not valid")
            user = self.reviews.authenticate(token, self.audience)
            if user is None or not user.username.startswith(SERVICE_ACCOUNT_PREFIX):
                self._refused.put(digest, True)
                raise unauthorized("the bearer token is not valid")
            self._tokens.put(digest, user)
        return user

    def _may(self, user: ReviewedUser, access: Access) -> bool:
        key = (user.username, user.groups, access)
        allowed = self._access.get(key)
        if allowed is None:
            allowed = self.reviews.allowed(
                access, user=user.username, groups=user.groups, uid=user.uid or None
            )
            self._access.put(key, allowed)
        return allowed
