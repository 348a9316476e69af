"""Retries of the kopf event handlers whose handling failed (database or API server down).

kopf does not retry `on.event` handlers, and an object may see no other event for a long
time: without these, a reconcile lost to a database restart would stay lost. A failure is
remembered by the object's identity only (its kind, name, namespace and uid), never its
body, and fired by the sweeper with backoff (1 s, doubling to 60 s): the object is read
again from the API server and handled as kopf would hand over a listed object (as deleted
when it is gone). A handler may also requeue another object whose outcome it changed
(`requeue`: a new model or tool, or a deleted tool, for the agents that name it).
kopf's handling of an object and a retry of it never run at once (one lock per object,
striped); the object's next event, once handled, supersedes the retry, unless the retry
was asked for after that handling began (a requeue must not be dropped by a handling that
read the world before the change it names).

The Agents have a workqueue of their own (`agent_workers`), which orders every handling
of an Agent: a retry of one (`queued`) is not handled on the sweeper's thread but put on
that queue, to be read afresh when its turn comes, so it can neither overtake an older
event still waiting there nor be overtaken by it. It stays pending, out of `due()`, until
that handling succeeds or fails, so its backoff goes on.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
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
Enqueue = Callable[["RuntimeContext", ObjectRef], None]
# Every retried handler by name: a retry keeps the name, not the function or its kwargs.
_HANDLERS: dict[str, tuple[CustomResourceKind, Handler]] = {}
# The handlings whose retries go on a workqueue (`queued`), by name.
_QUEUED: dict[str, Enqueue] = {}


@dataclass(frozen=True)
class PendingRetry:
    handler: str
    ref: ObjectRef
    attempts: int
    due: float
    # When it was last asked for, in the order of the writes to `Retries`: a handling
    # that began after it supersedes it (`succeeded`).
    stamp: int
    # Put on a workqueue and not handled yet: not due again until then.
    handed_over: bool = False

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
        self._stamp = 0
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def object_lock(self, ref: ObjectRef) -> threading.Lock:
        return self._stripes[hash(ref.uid or ref.name) % LOCK_STRIPES]

    def begun(self) -> int:
        """A handling begins: what `succeeded` needs to tell the retries asked for since."""
        with self._lock:
            return self._stamp

    def failed(self, handler: str, ref: ObjectRef) -> float:
        """Retry this object's handling later; the delay until then."""
        key = retry_key(handler, ref)
        with self._lock:
            previous = self._pending.get(key)
            attempts = 1 if previous is None else previous.attempts + 1
            delay = min(MOST_DELAY, FIRST_DELAY * 2.0 ** (attempts - 1))
            self._stamp += 1
            self._pending[key] = PendingRetry(
                handler, ref, attempts, self._clock() + delay, self._stamp
            )
        return delay

    def requeue(self, handler: str, ref: ObjectRef) -> None:
        """Handle this object again, read afresh: something it depends on changed with no
        event of its own (a model it names was created). Due at the next pass; a retry
        already pending keeps its time and backoff, but a handling already under way no
        longer supersedes it (it may have read the world before the change)."""
        key = retry_key(handler, ref)
        with self._lock:
            self._stamp += 1
            previous = self._pending.get(key)
            if previous is None:
                self._pending[key] = PendingRetry(handler, ref, 0, self._clock(), self._stamp)
            else:
                self._pending[key] = replace(previous, stamp=self._stamp, handed_over=False)

    def succeeded(self, handler: str, ref: ObjectRef, begun: int) -> None:
        """A handling of this object that began at `begun` succeeded: it supersedes the
        retry pending, unless that was asked for after it began."""
        key = retry_key(handler, ref)
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None and pending.stamp <= begun:
                del self._pending[key]

    def hand_over(self, retry: PendingRetry) -> None:
        """`retry` was put on a workqueue: not due again until that handling ends."""
        with self._lock:
            if self._pending.get(retry.key) == retry:
                self._pending[retry.key] = replace(retry, handed_over=True)

    def due(self) -> list[PendingRetry]:
        now = self._clock()
        with self._lock:
            return [
                retry
                for retry in self._pending.values()
                if retry.due <= now and not retry.handed_over
            ]

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
    its retry, a success drops the retry pending (`Retries.succeeded`). For handlers called
    by kopf (`retried`) and for the Agent workqueue's threads (`agent_workers`)."""
    with context.retries.object_lock(ref):
        begun = context.retries.begun()
        try:
            call()
        except Exception as exc:
            delay = context.retries.failed(name, ref)
            log.warning(
                "%s of %s %s failed (%s); retried in %.0f s", name, ref.kind, ref.name, exc, delay
            )
        else:
            context.retries.succeeded(name, ref, begun)


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


def queued(name: str, enqueue: Enqueue) -> None:
    """Retries of the handling `name` are put on a workqueue by `enqueue`, whose thread
    reads the object afresh and handles it through `handle` (module docstring)."""
    _QUEUED[name] = enqueue


def fire_due_retries(context: RuntimeContext) -> int:
    """Handle again every object whose retry is due, read afresh, or put it on its
    workqueue. How many were fired."""
    memo = kopf.Memo()
    memo[CONTEXT_KEY] = context
    due = context.retries.due()
    for retry in due:
        enqueue = _QUEUED.get(retry.handler)
        if enqueue is not None:
            context.retries.hand_over(retry)
            enqueue(context, retry.ref)
            continue
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
