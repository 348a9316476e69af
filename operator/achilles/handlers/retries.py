"""Retries of the catalogue's kopf event handlers whose handling failed (database or API
server down). The Agents have a workqueue of their own, which re-adds a failed Agent
itself (agents.py, runtime/workqueue.py).

kopf does not retry `on.event` handlers, and an object may see no other event for a long
time: without these, a reconcile lost to a database restart would stay lost. A failure is
remembered by the object's identity only (its kind, name, namespace and uid), never its
body, with backoff (runtime/retries.py: 1 s, doubling to 60 s), and fired by the sweeper's
retries pass: the object is read again from the API server and handled as kopf would hand
over a listed object (as deleted when it is gone). kopf's handling of an object and a
retry of it never run at once (one lock per object, striped); the object's next event,
once handled, supersedes the retry, unless the retry was asked for after that handling
began.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import kopf

from achilles.handlers.context import RuntimeContext
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.kinds import CustomResourceKind, Scope
from achilles.runtime.retries import PendingRetry

log = logging.getLogger("achilles.operator")

CONTEXT_KEY = "runtime"

Handler = Callable[..., None]
# Every retried handler by name: a retry keeps the name, not the function or its kwargs.
_HANDLERS: dict[str, tuple[CustomResourceKind, Handler]] = {}


def context_of(memo: Any) -> RuntimeContext:
    context = memo.get(CONTEXT_KEY)
    if not isinstance(context, RuntimeContext):
        raise kopf.TemporaryError("the operator's runtime is starting", delay=2)
    return context


def _ref(kind: CustomResourceKind, meta: Any) -> ObjectRef:
    namespace = meta.get("namespace") if kind.scope is Scope.NAMESPACED else None
    return ObjectRef(kind.kind, kind.plural, meta["name"], namespace, meta.get("uid"))


def handle(context: RuntimeContext, name: str, ref: ObjectRef, call: Callable[[], None]) -> None:
    """Run one handling of `name`'s object under the object's lock; a failure schedules
    its retry, a success drops the retry pending (`Retries.succeeded`)."""
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


def fire_due_retries(context: RuntimeContext) -> int:
    """Handle again every object whose retry is due, read afresh. How many were fired."""
    memo = kopf.Memo()
    memo[CONTEXT_KEY] = context
    due = context.retries.due()
    for retry in due:
        _kind, handler = _HANDLERS[retry.handler]

        def call(retry: PendingRetry[ObjectRef] = retry, handler: Handler = handler) -> None:
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
