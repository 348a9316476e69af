"""Asking the Kubernetes API server who a token is and what someone may do.

`TokenReview` (authentication.k8s.io/v1) turns a bearer token into the user the API
server knows, for one audience; `SubjectAccessReview` (authorization.k8s.io/v1) asks RBAC
(or whatever authorizer the cluster runs) whether a user may do a verb on a resource. The
API's own ServiceAccount needs `create` on both (the chart's ClusterRole).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from achilles.errors import ClusterUnavailable
from achilles.k8s.client import api_client

T = TypeVar("T")

# A review is on the path of a request: it must not hang on an unreachable API server.
REQUEST_TIMEOUT_SECONDS = 5


@dataclass(frozen=True)
class ReviewedUser:
    """A user as the API server authenticated them."""

    username: str
    uid: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Access:
    """What a SubjectAccessReview asks: may `user` do `verb` on `resource`?"""

    verb: str
    resource: str
    group: str = ""
    name: str | None = None
    namespace: str | None = None


class Reviews:
    """One API client for the life of the process (its connection pool is reused)."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        self._api = api_client(kubeconfig)

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    def authenticate(self, token: str, audience: str) -> ReviewedUser | None:
        """The user `token` is, if the API server accepts it for `audience`; else None."""
        review = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=[audience])
        )
        result = self._call(
            lambda: client.AuthenticationV1Api(self._api).create_token_review(
                review, _request_timeout=REQUEST_TIMEOUT_SECONDS
            ),
            "TokenReview",
        )
        status = result.status
        if status is None or not status.authenticated or status.user is None:
            return None
        # The API server says which of the asked audiences the token is for; a server that
        # returns none is not audience-aware, and its answer cannot bind the token to ours.
        if audience not in (status.audiences or []):
            return None
        user = status.user
        return ReviewedUser(
            username=user.username or "", uid=user.uid or "", groups=tuple(user.groups or ())
        )

    def allowed(
        self, access: Access, *, user: str, groups: tuple[str, ...] = (), uid: str | None = None
    ) -> bool:
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user,
                groups=list(groups) or None,
                uid=uid or None,
                resource_attributes=client.V1ResourceAttributes(
                    verb=access.verb,
                    resource=access.resource,
                    group=access.group,
                    name=access.name,
                    namespace=access.namespace,
                ),
            )
        )
        result = self._call(
            lambda: client.AuthorizationV1Api(self._api).create_subject_access_review(
                review, _request_timeout=REQUEST_TIMEOUT_SECONDS
            ),
            "SubjectAccessReview",
        )
        return bool(result.status is not None and result.status.allowed)

    @staticmethod
    def _call(call: Callable[[], T], what: str) -> T:
        try:
            return call()
        except ApiException as exc:
            raise ClusterUnavailable(
                f"the Kubernetes API server refused a {what}: {exc.status} {exc.reason}"
            ) from exc
        except (HTTPError, OSError) as exc:
            raise ClusterUnavailable(f"the Kubernetes API server is unreachable: {exc}") from exc
