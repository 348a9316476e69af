"""The notifier: the outbox's notifications POSTed to the platform's webhook, at least
once (services/notifications.py).

Wakes on the outbox's NOTIFY (a notification written), when the earliest retry is due
(its backoff timer), or every NOTIFIER_TICK; goes on at once while full batches come. A
failed pass (the database down) is retried with the runtime's backoff
(`LoopHandle.drive`).
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

    def deliver() -> float:
        done = notifier.deliver_once(sender)
        if done.full_batch:
            return 0.0
        if done.next_due_in is None:
            return NOTIFIER_TICK
        return min(NOTIFIER_TICK, done.next_due_in)

    try:
        loop.drive(deliver)  # a failed pass: the runtime's backoff
    finally:
        sender.close()
