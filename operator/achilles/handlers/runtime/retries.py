"""Retries of the kopf event handlers whose handling failed (database or API server down).

kopf does not retry `on.event` handlers, and an object may see no other event for a long
time: without these, a reconcile lost to a database restart would stay lost. A failure is
remembered by the object's identity only (its kind, name, namespace and uid), never its
body, and fired by the sweeper with backoff (1 s, doubling to 60 s): the object is read
again from the API server and handled as kopf would hand over a listed object (as deleted
when it is gone). A handler may also requeue another object whose outcome it changed
(`requeue`: a new model or tool, or a deleted tool, for the agents that name it).
kopf's handling of an object (or the Agent workqueue's, `agent_workers`) and a retry of
it never run at once (one lock per object, striped); the object's next event, once
handled, supersedes the retry.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kopf

from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.kinds import CustomResourceKind, Scope

if TYPE_CHECKING:
    from achilles.handlers.runtime.context import RuntimeContext

log = logging.getLogger("achilles.operator")

FIRST_DELAY = 1.0
MOST_DELAY = 60.0
LOCK_STRIPES = 64
CONTEXT_KEY = "runtime"

Handler = Callable[..., None]
# Every retried handler by name: a retry keeps the name, not the function or its kwargs.
_HANDLERS: dict[str, tuple[CustomResourceKind, Handler]] = {}


@dataclass(frozen=True)
class PendingRetry:
    handler: str
    ref: ObjectRef
    attempts: int
    due: float

    @property
    def key(self) -> str:
        return retry_key(self.handler, self.ref)


def retry_key(handler: str, ref: ObjectRef) -> str:
    return f"{handler}/{ref.uid or f'{ref.namespace}/{ref.name}'}"


class Retries:
    """The pending retries, and the per-object locks kopf's handling and a retry share."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, PendingRetry] = {}
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def object_lock(self, ref: ObjectRef) -> threading.Lock:
        return self._stripes[hash(ref.uid or ref.name) % LOCK_STRIPES]

    def failed(self, handler: str, ref: ObjectRef) -> float:
        """Retry this object's handling later; the delay until then."""
        key = retry_key(handler, ref)
        with self._lock:
            previous = self._pending.get(key)
            attempts = 1 if previous is None else previous.attempts + 1
            delay = min(MOST_DELAY, FIRST_DELAY * 2.0 ** (attempts - 1))
            self._pending[key] = PendingRetry(handler, ref, attempts, self._clock() + delay)
        return delay

    def requeue(self, handler: str, ref: ObjectRef) -> None:
        """Handle this object again at the next pass, read afresh: something it depends on
        changed with no event of its own (a model it names was created). A retry already
        pending keeps its place."""
        key = retry_key(handler, ref)
        with self._lock:
            self._pending.setdefault(key, PendingRetry(handler, ref, 0, self._clock()))

    def succeeded(self, handler: str, ref: ObjectRef) -> None:
        with self._lock:
            self._pending.pop(retry_key(handler, ref), None)

    def due(self) -> list[PendingRetry]:
        now = self._clock()
        with self._lock:
            return [retry for retry in self._pending.values() if retry.due <= now]

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


def context_of(memo: Any) -> RuntimeContext:
    from achilles.handlers.runtime.context import RuntimeContext

    context = memo.get(CONTEXT_KEY)
    if not isinstance(context, RuntimeContext):
        raise kopf.TemporaryError("the operator's runtime is starting", delay=2)
    return context


def _ref(kind: CustomResourceKind, meta: Any) -> ObjectRef:
    namespace = meta.get("namespace") if kind.scope is Scope.NAMESPACED else None
    return ObjectRef(kind.kind, kind.plural, meta["name"], namespace, meta.get("uid"))


def handle(context: RuntimeContext, name: str, ref: ObjectRef, call: Callable[[], None]) -> None:
    """Run one handling of `name`'s object under the object's lock; a failure schedules
    its retry, a success drops the retry pending. For handlers called by kopf (`retried`)
    and for the Agent workqueue's threads (`agent_workers`)."""
    with context.retries.object_lock(ref):
        try:
            call()
        except Exception as exc:
            delay = context.retries.failed(name, ref)
            log.warning(
                "%s of %s %s failed (%s); retried in %.0f s", name, ref.kind, ref.name, exc, delay
            )
        else:
            context.retries.succeeded(name, ref)


def retried(kind: CustomResourceKind) -> Callable[[Handler], Handler]:
    """An event handler of `kind` whose failures are retried (module docstring)."""

    def decorate(handler: Handler) -> Handler:
        _HANDLERS[handler.__name__] = (kind, handler)

        @functools.wraps(handler)
        def wrapper(**kwargs: Any) -> None:
            context = context_of(kwargs["memo"])
            ref = _ref(kind, kwargs["meta"])
            handle(context, handler.__name__, ref, lambda: handler(**kwargs))

        return wrapper

    return decorate


def fire_due_retries(context: RuntimeContext) -> int:
    """Handle again every object whose retry is due, read afresh. How many were fired."""
    memo = kopf.Memo()
    memo[CONTEXT_KEY] = context
    due = context.retries.due()
    for retry in due:
        _kind, handler = _HANDLERS[retry.handler]

        def call(retry: PendingRetry = retry, handler: Handler = handler) -> None:
            body = context.resources.read_object(retry.ref)
            if body is None:  # gone meanwhile: handled as its deletion
                meta = {"name": retry.ref.name, "namespace": retry.ref.namespace}
                body, event_type = {"metadata": {**meta, "uid": retry.ref.uid}}, "DELETED"
            else:
                event_type = None  # as kopf hands over a listed object: reconcile in full
            handler(
                type=event_type,
                body=body,
                meta=body.get("metadata") or {},
                spec=body.get("spec") or {},
                status=body.get("status") or {},
                memo=memo,
                logger=log,
            )

        handle(context, retry.handler, retry.ref, call)
    return len(due)
