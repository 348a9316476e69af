"""The notifier: the outbox's notifications POSTed to the platform's webhook, at least
once (services/notifications.py).

Wakes on the outbox's NOTIFY (a notification written), when the earliest retry is due
(its backoff timer), or every NOTIFIER_TICK; goes on at once while full batches come.
A notification given up (dead) is logged and posted as a Warning Event on the
AgentPlatform; `achilles notifications list --dead` shows each with its last error.
Owns nothing in memory: the outbox's rows say what is due.
"""

from __future__ import annotations

import logging

from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers.context import RuntimeContext
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.agent_platform import SINGLETON_NAME
from achilles.k8s.resources.kinds import AGENT_PLATFORM
from achilles.k8s.secrets import SecretUnavailable, read_secret_key
from achilles.services import notifications
from achilles.webhook.sender import WebhookSender

log = logging.getLogger("achilles.operator")

# The NOTIFY and the backoff timer wake it, and the listener wakes it when it reconnects
# (NOTIFYs sent while it was away are lost); the tick is a last resort, long enough that
# an idle operator's transactions stay few (achilles bench kept-jobs).
NOTIFIER_TICK = 300.0
AFTER_ERROR = 5.0
NAME = "notifier"


def run(context: RuntimeContext) -> None:
    woken = context.wakes.target(NAME)
    sender = WebhookSender()
    try:
        while not context.stop.is_set():
            done = context.run_pass("notifier", lambda: deliver_once(context, sender))
            if done is None:
                wait = AFTER_ERROR
            elif done.full_batch:
                wait = 0.0
            elif done.next_due_in is None:
                wait = NOTIFIER_TICK
            else:
                wait = min(NOTIFIER_TICK, done.next_due_in)
            if wait > 0:
                woken.wait(wait)
    finally:
        sender.close()


def deliver_once(context: RuntimeContext, sender: WebhookSender) -> notifications.DeliveryPass:
    namespace = context.config.job_template.namespace

    def read_secret(name: str, key: str) -> bytes:
        try:
            return read_secret_key(context.resources.core, namespace, name, key)
        except SecretUnavailable as exc:
            raise notifications.SigningSecretUnavailable(str(exc)) from exc

    done = notifications.deliver_due(context.database, sender, read_secret)
    platform = ObjectRef(AGENT_PLATFORM.kind, AGENT_PLATFORM.plural, SINGLETON_NAME)
    for dead in done.dead:
        message = (
            f"notification {dead.delivery_id} ({dead.kind}) given up after its last attempt:"
            f" {dead.error}"
        )
        log.warning("%s", message)
        context.resources.post_event(
            platform, EventType.WARNING, EventReason.NOTIFICATION_DEAD, message
        )
    return done
