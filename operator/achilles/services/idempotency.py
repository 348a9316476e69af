"""Write once per `Idempotency-Key`: the key, the write and its response in one transaction.

A use case that honours idempotency keys takes a `Once` and calls, inside its own
transaction, `once.claim(session)` before writing and `once.record(session, result)`
after: the claim, the change and the recorded response commit together or not at all,
so a retry (or the same request reaching another replica) never writes twice and always
gets the first response. A used key raises `Replayed` out of the transaction (nothing
written); the same key with another request raises `IdempotencyKeyReused`. Only writes
are remembered: a request the rules refused (409, 412: nothing written) releases its key
in the same transaction, so it leaves no trace and a retry is judged afresh.

What the response *is* — status, JSON body, headers — is the entry point's business: it
passes `render`, which turns the use case's result into a `StoredResponse`. Something
that happens only after the commit (waking the agent) can `amend` the recorded response,
so a replay shows what the first caller saw; if the process dies in between, a replay
shows the response as committed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from achilles.db.api import idempotency as keys
from achilles.db.database import Database
from achilles.errors import AchillesError

if TYPE_CHECKING:
    from achilles.db.database import Session

T = TypeVar("T")

# How long a key is remembered: a retry later than this is a new request.
KEY_TTL = timedelta(hours=24)


@dataclass(frozen=True)
class StoredResponse:
    status: int
    body: Any  # JSON
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class IdempotentRequest:
    """Whose key, which key, and a fingerprint of what was asked with it."""

    user_key: str
    key: str
    fingerprint: str


class Replayed(Exception):
    """The key was used before: answer with its response (nothing was written now)."""

    def __init__(self, response: StoredResponse) -> None:
        super().__init__(f"replayed response {response.status}")
        self.response = response


class IdempotencyKeyReused(AchillesError):
    """The key was used for a different request."""


@dataclass(frozen=True)
class Once(Generic[T]):
    request: IdempotentRequest
    render: Callable[[T], StoredResponse]
    ttl: timedelta = KEY_TTL

    def claim(self, session: Session) -> None:
        stored = keys.claim(
            session, self.request.user_key, self.request.key, self.request.fingerprint, self.ttl
        )
        if stored is None:
            return
        if stored.fingerprint != self.request.fingerprint:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {self.request.key!r} was used for a different request;"
                " use a new key for a new request"
            )
        raise Replayed(StoredResponse(stored.status, stored.body, stored.headers))

    def record(self, session: Session, result: T) -> StoredResponse:
        """Remember the response of a write (2xx); a refusal (nothing written) releases
        the key instead, so a refused request leaves nothing behind and may be retried."""
        response = self.render(result)
        if not 200 <= response.status < 300:
            keys.release(session, self.request.user_key, self.request.key)
            return response
        keys.record(
            session,
            self.request.user_key,
            self.request.key,
            status=response.status,
            body=response.body,
            headers=dict(response.headers),
        )
        return response

    def amend(self, database: Database, result: T) -> StoredResponse:
        """Record the final response after the commit (its own small transaction)."""
        with database.transaction() as session:
            return self.record(session, result)


def purge_expired(database: Database, ttl: timedelta = KEY_TTL) -> int:
    with database.transaction() as session:
        return keys.purge_expired(session, ttl)
