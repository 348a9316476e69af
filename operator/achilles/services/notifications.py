"""Delivering the outbox to the platform's webhook, at least once (docs/operator.md).

One pass claims a batch of due notifications (a short transaction), posts each signed,
then records the outcomes (another short transaction): a 2xx is delivered; anything else
is retried with exponential backoff (`domain/notifications.py`) until MAX_ATTEMPTS, and
then dead with its last error. When the receiver cannot be reached, the rest of the batch
is not tried (it would wait the same timeout each): those rows are released unattempted,
due again with the failed one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from achilles.db.database import Database
from achilles.db.outbox.delivery import (
    ClaimedNotification,
    OutboxRow,
    claim_due,
    list_notifications,
    record_delivered,
    record_failed,
    release_unattempted,
    retry_dead,
    seconds_until_next_due,
)
from achilles.db.outbox.settings import WebhookSettings, load_webhook
from achilles.domain.notifications import MAX_ATTEMPTS, DeliveryState, retry_delay
from achilles.domain.timestamps import iso_utc
from achilles.webhook.sender import SendResult, WebhookSender

BATCH = 20
# A claimed row waits this long before another replica may claim it again: longer than
# a whole batch of timeouts, so only a notifier that died leaves it to the lease.
LEASE_MARGIN = timedelta(seconds=30)


class SigningSecretUnavailable(Exception):
    """The webhook's signing secret cannot be read (the message says why)."""


# (secret name, key) -> the secret's bytes; raises SigningSecretUnavailable.
SecretReader = Callable[[str, str], bytes]


@dataclass(frozen=True)
class DeadNotification:
    delivery_id: str
    kind: str
    error: str


@dataclass
class DeliveryPass:
    delivered: int = 0
    failed: int = 0
    dead: list[DeadNotification] = field(default_factory=list)
    # A full batch was claimed: more may be due now.
    full_batch: bool = False
    # Seconds until the earliest pending notification is due; None: none pending.
    next_due_in: float | None = None


def body_of(notification: ClaimedNotification) -> bytes:
    """The request body: the same bytes on every attempt of one notification."""
    document = {
        "id": str(notification.delivery_id),
        "type": notification.kind,
        "occurredAt": iso_utc(notification.created_at),
        "data": notification.payload,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def lease_for(batch: int, sender: WebhookSender) -> timedelta:
    return timedelta(seconds=batch * sender.timeout_seconds) + LEASE_MARGIN


def deliver_due(
    database: Database, sender: WebhookSender, read_secret: SecretReader, *, batch: int = BATCH
) -> DeliveryPass:
    with database.transaction() as session:
        webhook = load_webhook(session)
        if webhook is None:
            # Rows written before the webhook was removed wait for one (no timer: the
            # settings' change is a tick away, and due rows must not spin the loop).
            return DeliveryPass()
        claimed = claim_due(session, batch=batch, lease=lease_for(batch, sender))
        if not claimed:
            return DeliveryPass(next_due_in=seconds_until_next_due(session))
    results = _send(webhook, claimed, sender, read_secret)
    done = DeliveryPass(full_batch=len(claimed) == batch)
    with database.transaction() as session:
        record_delivered(session, [n.id for n, result in results if result.error is None])
        done.delivered = sum(1 for _, result in results if result.error is None)
        for notification, result in results:
            if result.error is None:
                continue
            done.failed += 1
            retry_in = (
                None
                if notification.attempts >= MAX_ATTEMPTS
                else retry_delay(notification.attempts)
            )
            if record_failed(session, notification.id, result.error, retry_in=retry_in) and (
                retry_in is None
            ):
                done.dead.append(
                    DeadNotification(str(notification.delivery_id), notification.kind, result.error)
                )
        untried = [n.id for n in claimed[len(results) :]]
        if untried:
            last = results[-1][0]
            release_unattempted(session, untried, retry_in=retry_delay(last.attempts))
        done.next_due_in = seconds_until_next_due(session)
    return done


def _send(
    webhook: WebhookSettings,
    claimed: list[ClaimedNotification],
    sender: WebhookSender,
    read_secret: SecretReader,
) -> list[tuple[ClaimedNotification, SendResult]]:
    """Each claimed notification's result, in order, up to the first the receiver could
    not be reached for (the rest are not tried)."""
    if webhook.secret_name is None:
        failure = SendResult("the webhook has no signing secret (notifications.secretRef)")
        return [(claimed[0], failure)]
    try:
        secret = read_secret(webhook.secret_name, webhook.secret_key)
    except SigningSecretUnavailable as exc:
        return [(claimed[0], SendResult(f"signing secret unavailable: {exc}", transport=True))]
    results: list[tuple[ClaimedNotification, SendResult]] = []
    for notification in claimed:
        result = sender.send(
            webhook.url, secret, notification.delivery_id, notification.kind, body_of(notification)
        )
        results.append((notification, result))
        if result.transport:
            break
    return results


def list_outbox(database: Database, *, dead_only: bool, limit: int) -> list[OutboxRow]:
    """What admins read (`achilles notifications list`): the newest first."""
    with database.transaction() as session:
        state = DeliveryState.DEAD if dead_only else None
        return list_notifications(session, state=state, limit=limit)


def retry_dead_notifications(database: Database) -> int:
    """Every dead notification due again now, with a fresh count of attempts (the receiver
    was fixed); the notifier wakes by the outbox's NOTIFY on its next tick."""
    with database.transaction() as session:
        return retry_dead(session)
