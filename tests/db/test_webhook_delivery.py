"""Delivering the outbox to a real HTTP receiver (issue 22): a server on a port of its own
that checks each signature as a portal would, and answers 2xx, fails with a 5xx, hangs, or
is down. The notifier's pass (`services.notifications.deliver_due`) runs as the operator's
login against the real database.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.outbox.delivery import enqueue
from achilles.db.outbox.models import NotificationOutbox
from achilles.db.roles import Component
from achilles.domain.notifications import MAX_ATTEMPTS, NotificationKind
from achilles.domain.vocabulary import EventReason, EventType
from achilles.domain.webhook_signature import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    SignatureError,
    signature,
    verify,
)
from achilles.handlers.controllers import notifier
from achilles.k8s.objects import ObjectRef, Resources
from achilles.services import notifications
from achilles.webhook.sender import WebhookSender
from achilles_dev.webhook_receiver import FAIL, HANG, OK, WebhookReceiver
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.logins import login_url
from tests.db.test_cli_journal import achilles

SECRET = b"the-portal-and-the-engine-share-this"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET) as server:
        yield server


@pytest.fixture
def operator_db(db: Engine, database_url: str, receiver: WebhookReceiver) -> Iterator[Database]:
    set_settings(db, agent_webhook_url=receiver.url, agent_webhook_secret_name="hook")
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=2)
    yield database
    database.dispose()


def _secret(name: str, key: str) -> bytes:
    assert (name, key) == ("hook", "secret")
    return SECRET


def _notify(database: Database, agent_id: int, count: int = 1) -> None:
    with database.transaction() as session:
        for n in range(count):
            enqueue(
                session, NotificationKind.RUN_FAILED, owner=None, agent=agent_id, details={"n": n}
            )


def _rows(engine: Engine) -> list[NotificationOutbox]:
    with Session(engine) as session:
        query = select(NotificationOutbox).order_by(NotificationOutbox.id)
        return list(session.execute(query).scalars())


def _make_due(engine: Engine) -> None:
    """The backoff's wait, skipped: every pending row due now."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE notification_outbox SET next_attempt_at = now()"))


def test_a_delivery_is_signed_and_carries_its_id_and_payload(
    db: Engine, operator_db: Database, receiver: WebhookReceiver
) -> None:
    agent_id = make_agent(db, make_owner(db, "olga"), name="digest")
    _notify(operator_db, agent_id)
    sender = WebhookSender(timeout_seconds=5)
    done = notifications.deliver_due(operator_db, sender, _secret)
    assert (done.delivered, done.failed, done.next_due_in) == (1, 0, None)
    [request] = receiver.requests()
    [row] = _rows(db)
    assert (request.status, request.signature_error) == (204, None)
    assert request.delivery_id == str(row.delivery_id)
    assert request.event == "run.failed"
    assert request.body is not None
    assert request.body["id"] == str(row.delivery_id)
    assert request.body["type"] == "run.failed"
    assert request.body["data"]["owner"] == "olga"
    assert request.body["data"]["agent"]["name"] == "digest"
    assert (row.state, row.attempts, row.last_error) == ("delivered", 1, None)
    assert row.delivered_at is not None


def test_a_5xx_is_retried_with_backoff_and_the_same_delivery_id(
    db: Engine, operator_db: Database, receiver: WebhookReceiver
) -> None:
    _notify(operator_db, make_agent(db))
    sender = WebhookSender(timeout_seconds=5)
    receiver.set_mode(FAIL)
    done = notifications.deliver_due(operator_db, sender, _secret)
    assert (done.delivered, done.failed) == (0, 1)
    assert done.next_due_in is not None
    assert 3 < done.next_due_in <= 5
    [row] = _rows(db)
    assert (row.state, row.attempts, row.last_error) == ("pending", 1, "HTTP 503: unavailable")
    # Not due yet: a pass now sends nothing.
    assert notifications.deliver_due(operator_db, sender, _secret).failed == 0
    assert len(receiver.requests()) == 1

    receiver.set_mode(OK)
    _make_due(db)
    assert notifications.deliver_due(operator_db, sender, _secret).delivered == 1
    first, second = receiver.requests()
    assert (first.status, second.status) == (503, 204)
    assert first.delivery_id == second.delivery_id == str(row.delivery_id)
    assert first.body == second.body  # the same bytes on every attempt
    [row] = _rows(db)
    assert (row.state, row.attempts) == ("delivered", 2)


def test_a_hanging_receiver_costs_one_timeout_and_the_batch_waits(
    db: Engine, operator_db: Database, receiver: WebhookReceiver
) -> None:
    _notify(operator_db, make_agent(db), count=5)
    sender = WebhookSender(timeout_seconds=0.5)
    receiver.set_mode(HANG)
    done = notifications.deliver_due(operator_db, sender, _secret)
    # One attempt timed out; the other four were not tried (each would wait the same).
    assert (done.delivered, done.failed) == (0, 1)
    rows = _rows(db)
    assert [row.attempts for row in rows] == [1, 0, 0, 0, 0]
    assert rows[0].last_error is not None
    assert rows[0].last_error.startswith("no answer within")
    assert {row.state for row in rows} == {"pending"}

    receiver.set_mode(OK)
    _make_due(db)
    assert notifications.deliver_due(operator_db, sender, _secret).delivered == 5
    assert {r.delivery_id for r in receiver.accepted()} == {str(row.delivery_id) for row in rows}


def test_a_receiver_that_is_down_is_retried_and_then_reached(
    db: Engine, operator_db: Database, receiver: WebhookReceiver
) -> None:
    _notify(operator_db, make_agent(db), count=3)
    sender = WebhookSender(timeout_seconds=2)
    receiver.stop()
    done = notifications.deliver_due(operator_db, sender, _secret)
    assert (done.delivered, done.failed) == (0, 1)
    assert "ConnectError" in (_rows(db)[0].last_error or "")
    receiver.start()  # back, on the same port
    _make_due(db)
    assert notifications.deliver_due(operator_db, sender, _secret).delivered == 3
    assert {row.state for row in _rows(db)} == {"delivered"}


def test_a_delivery_that_keeps_failing_ends_dead_with_its_last_error(
    db: Engine, operator_db: Database, receiver: WebhookReceiver, database_url: str
) -> None:
    _notify(operator_db, make_agent(db))
    sender = WebhookSender(timeout_seconds=5)
    receiver.set_mode(FAIL)
    dead: list[notifications.DeadNotification] = []
    for _ in range(MAX_ATTEMPTS):
        _make_due(db)
        dead += notifications.deliver_due(operator_db, sender, _secret).dead
    [row] = _rows(db)
    assert (row.state, row.attempts, row.last_error) == (
        "dead",
        MAX_ATTEMPTS,
        "HTTP 503: unavailable",
    )
    assert [d.delivery_id for d in dead] == [str(row.delivery_id)]
    assert len(receiver.requests()) == MAX_ATTEMPTS
    _make_due(db)
    assert notifications.deliver_due(operator_db, sender, _secret).failed == 0  # dead: left

    listed = achilles(database_url, "notifications", "list", "--dead", "--json")
    assert listed.returncode == 0, listed.stderr
    [shown] = json.loads(listed.stdout)
    assert (shown["delivery_id"], shown["state"], shown["last_error"]) == (
        str(row.delivery_id),
        "dead",
        "HTTP 503: unavailable",
    )
    retried = achilles(database_url, "notifications", "retry")
    assert retried.returncode == 0, retried.stderr
    receiver.set_mode(OK)
    assert notifications.deliver_due(operator_db, sender, _secret).delivered == 1


def test_an_unreadable_signing_secret_is_a_failed_attempt_with_its_reason(
    db: Engine, operator_db: Database, receiver: WebhookReceiver
) -> None:
    _notify(operator_db, make_agent(db))

    def missing(name: str, key: str) -> bytes:
        raise notifications.SigningSecretUnavailable(f"Secret achilles-runs/{name} does not exist")

    done = notifications.deliver_due(operator_db, WebhookSender(timeout_seconds=5), missing)
    assert done.failed == 1
    [row] = _rows(db)
    assert row.last_error == "signing secret unavailable: Secret achilles-runs/hook does not exist"
    assert receiver.requests() == []


class _Kubernetes:
    """The API server as the operator's notifier uses it: the Secret, and its Events."""

    def __init__(self) -> None:
        self.core = self  # read_namespaced_secret, as k8s/rest.py's CoreApi
        self.reads: list[tuple[str, str]] = []
        self.events: list[tuple[str, str | None, str, str, str]] = []

    def read_namespaced_secret(self, name: str, namespace: str) -> dict[str, Any]:
        self.reads.append((namespace, name))
        return {"data": {"secret": base64.b64encode(SECRET).decode()}}

    def post_event(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> None:
        self.events.append((ref.kind, ref.namespace, event_type, reason, message))


def test_the_operator_posts_a_dead_notification_on_the_agentplatform(
    db: Engine, operator_db: Database, receiver: WebhookReceiver
) -> None:
    """What admins see without the CLI: a Warning Event on AgentPlatform/default with the
    last error; the signing Secret read by name in the runs namespace."""
    _notify(operator_db, make_agent(db))
    kubernetes = _Kubernetes()
    reconciler = notifier.Notifier(operator_db, cast(Resources, kubernetes), "achilles-runs")
    sender = WebhookSender(timeout_seconds=5)
    receiver.set_mode(FAIL)
    for _ in range(MAX_ATTEMPTS):
        _make_due(db)
        reconciler.deliver_once(sender)
    assert all(r.signature_error is None for r in receiver.requests())  # signed all along
    assert set(kubernetes.reads) == {("achilles-runs", "hook")}
    [row] = _rows(db)
    assert row.state == "dead"
    [(kind, namespace, event_type, reason, message)] = kubernetes.events
    assert (kind, namespace, event_type, reason) == (
        "AgentPlatform",
        None,
        EventType.WARNING,
        EventReason.NOTIFICATION_DEAD,
    )
    assert message == (
        f"notification {row.delivery_id} (run.failed) given up after its last attempt:"
        " HTTP 503: unavailable"
    )


def _post(receiver: WebhookReceiver, body: bytes, headers: dict[str, str]) -> int:
    return httpx.post(receiver.url, content=body, headers=headers, timeout=5).status_code


def test_the_receiver_refuses_forged_altered_and_expired_deliveries(
    receiver: WebhookReceiver,
) -> None:
    body = json.dumps({"id": str(uuid.uuid4()), "type": "run.failed"}).encode()
    now = int(time.time())

    def headers(secret: bytes, at: int, signed: bytes = body) -> dict[str, str]:
        return {
            TIMESTAMP_HEADER: str(at),
            SIGNATURE_HEADER: signature(secret, at, signed),
            DELIVERY_HEADER: str(uuid.uuid4()),
        }

    assert _post(receiver, body, headers(SECRET, now)) == 204
    assert _post(receiver, body, headers(b"someone else's secret", now)) == 401  # forged
    assert _post(receiver, body + b" ", headers(SECRET, now)) == 401  # body altered
    assert _post(receiver, body, headers(SECRET, now - 3600)) == 401  # expired (replayed)
    shifted = headers(SECRET, now)
    shifted[TIMESTAMP_HEADER] = str(now - 1)  # the timestamp changed, not the signature
    assert _post(receiver, body, shifted) == 401
    unsigned = headers(SECRET, now)
    del unsigned[SIGNATURE_HEADER]
    assert _post(receiver, body, unsigned) == 401
    errors = [r.signature_error for r in receiver.requests()]
    assert errors[0] is None
    assert (
        errors[1] == errors[2] == errors[4] == "the signature does not match the body and timestamp"
    )
    assert errors[3] is not None
    assert "expired or replayed" in errors[3]
    assert errors[5] == f"missing {SIGNATURE_HEADER}"


def test_verify_is_what_a_receiver_runs() -> None:
    body = b'{"id":"x"}'
    signed = signature(SECRET, 1_700_000_000, body)
    assert signed.startswith("v1=")
    assert len(signed) == 3 + 64
    verify(SECRET, "1700000000", signed, body, now=1_700_000_100)
    with pytest.raises(SignatureError, match="malformed"):
        verify(SECRET, "soon", signed, body, now=1_700_000_100)
    with pytest.raises(SignatureError, match="expired"):
        verify(SECRET, "1700000000", signed, body, now=1_700_000_301)


def test_without_a_webhook_pending_notifications_wait_and_set_no_timer(
    db: Engine, operator_db: Database, receiver: WebhookReceiver
) -> None:
    _notify(operator_db, make_agent(db))
    set_settings(db, agent_webhook_url=None, agent_webhook_secret_name=None)
    done = notifications.deliver_due(operator_db, WebhookSender(timeout_seconds=5), _secret)
    assert (done.delivered, done.failed, done.next_due_in, done.full_batch) == (0, 0, None, False)
    assert receiver.requests() == []
    assert [row.state for row in _rows(db)] == ["pending"]
