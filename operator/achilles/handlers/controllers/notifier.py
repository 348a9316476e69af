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
from dataclasses import dataclass

from achilles.db.database import Database
from achilles.domain.vocabulary import EventReason, EventType
from achilles.k8s.objects import ObjectRef, Resources
from achilles.k8s.resources.agent_platform import SINGLETON_NAME
from achilles.k8s.resources.kinds import AGENT_PLATFORM
from achilles.k8s.secrets import SecretUnavailable, read_secret_key
from achilles.runtime.manager import LoopHandle
from achilles.services import notifications
from achilles.webhook.sender import WebhookSender

log = logging.getLogger("achilles.operator")

# The NOTIFY and the backoff timer wake it, and the listener wakes it when it reconnects
# (NOTIFYs sent while it was away are lost); the tick is a last resort, long enough that
# an idle operator's transactions stay few (achilles bench kept-jobs).
NOTIFIER_TICK = 300.0
AFTER_ERROR = 5.0
NAME = "notifier"


@dataclass(frozen=True)
class Notifier:
    """The notifier's reconciler, with exactly what it uses (handlers/manager.py builds
    it): the outbox's database, the API server (the signing Secret's read through
    `resources.core`, the dead notifications' Events) and the namespace of the Secret
    (the runs')."""

    database: Database
    resources: Resources
    namespace: str

    def deliver_once(self, sender: WebhookSender) -> notifications.DeliveryPass:
        def read_secret(name: str, key: str) -> bytes:
            try:
                return read_secret_key(self.resources.core, self.namespace, name, key)
            except SecretUnavailable as exc:
                raise notifications.SigningSecretUnavailable(str(exc)) from exc

        done = notifications.deliver_due(self.database, sender, read_secret)
        platform = ObjectRef(AGENT_PLATFORM.kind, AGENT_PLATFORM.plural, SINGLETON_NAME)
        for dead in done.dead:
            message = (
                f"notification {dead.delivery_id} ({dead.kind}) given up after its last"
                f" attempt: {dead.error}"
            )
            log.warning("%s", message)
            self.resources.post_event(
                platform, EventType.WARNING, EventReason.NOTIFICATION_DEAD, message
            )
        return done


def run(notifier: Notifier, loop: LoopHandle) -> None:
    sender = WebhookSender()
    try:
        while not loop.stop.is_set():
            done = loop.run_pass(lambda: notifier.deliver_once(sender))
            if done is None:
                wait = AFTER_ERROR
            elif done.full_batch:
                wait = 0.0
            elif done.next_due_in is None:
                wait = NOTIFIER_TICK
            else:
                wait = min(NOTIFIER_TICK, done.next_due_in)
            if wait > 0:
                loop.woken.wait(wait)
    finally:
        sender.close()
