"""The notification webhook's receiver down (issue 22): a real receiver that checks every
signature, stopped for 10 minutes (60 s with --quick) while notifications are produced
(runs refused by the budget: `run.skipped`, written by the change's own transaction).
Once it is back every notification is delivered, none is lost and none was made up;
a notification sent more than once carries the same delivery id (at least once), and
the repeats are counted.
"""

from __future__ import annotations

import base64
import time

from kubernetes import client

from achilles_chaos.kube import RUNS_NAMESPACE
from achilles_chaos.scenario import Context
from achilles_chaos.waiting import hold, wait_for
from achilles_dev.webhook_receiver import WebhookReceiver

SECRET_NAME = "chaos-webhook"  # noqa: S105 - the Secret's name
SECRET = b"chaos-suite-signing-secret"
OUTAGE_SECONDS = 600.0
QUICK_OUTAGE_SECONDS = 60.0
# After the receiver is back: the longest backoff (10 min) plus a notifier pass.
DELIVERED_TIMEOUT = 720.0


def _signing_secret(ctx: Context) -> None:
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=SECRET_NAME),
        data={"secret": base64.b64encode(SECRET).decode()},
    )
    _delete_secret(ctx)
    ctx.kube.core.create_namespaced_secret(RUNS_NAMESPACE, body)


def _set_webhook(ctx: Context, url: str | None) -> None:
    notifications = None if url is None else {"webhookUrl": url, "secretRef": {"name": SECRET_NAME}}
    ctx.kube.patch("AgentPlatform", "default", {"spec": {"notifications": notifications}})
    wait_for(
        lambda: ctx.journal.scalar(
            "SELECT agent_webhook_url IS NOT DISTINCT FROM %s FROM platform_settings", (url,)
        ),
        60,
        what=f"the operator to mirror the webhook {url}",
    )


def _failed_run_is_notified(ctx: Context, receiver: WebhookReceiver) -> None:
    """A run that fails on the real node (its model answers 502) is notified, signed."""
    ctx.agent("fails", "Say hello.", ctx.model("broken", ctx.cluster.broken.base_url("html-502")))
    agent_id = ctx.agent_ids(["fails"])["fails"]
    after = ctx.last_run_id()
    ctx.request("fails")
    run_id = ctx.new_runs([agent_id], after, 60)[agent_id]
    [row] = ctx.wait_ended([run_id], 240, "the failing run to end").values()
    ctx.result.check(row["state"] == "failed", f"run {run_id} ended {row['state']}, not failed")

    def notified() -> bool:
        return any(
            request.event == "run.failed"
            and request.body is not None
            and request.body["data"]["run"]["id"] == run_id
            for request in receiver.accepted()
        )

    wait_for(notified, 60, what=f"run {run_id}'s failure at the webhook")


def _outbox(ctx: Context) -> list[dict[str, object]]:
    """The scenario's notifications (its Agents' namespace)."""
    rows: list[dict[str, object]] = ctx.journal.rows(
        "SELECT delivery_id::text AS delivery_id, kind, state, attempts, last_error"
        " FROM notification_outbox WHERE payload->'agent'->>'namespace' = %s ORDER BY id",
        (ctx.namespace,),
    )
    return rows


def webhook_down(ctx: Context) -> None:
    r = ctx.result
    outage = QUICK_OUTAGE_SECONDS if ctx.quick else OUTAGE_SECONDS
    during = 12 if ctx.quick else 40
    r.injected = (
        f"the webhook's receiver down for {outage:.0f}s while {during} notifications are made"
    )
    receiver = WebhookReceiver(SECRET)
    receiver.start()
    _signing_secret(ctx)
    try:
        op = ctx.operator()
        _set_webhook(ctx, receiver.url)
        _failed_run_is_notified(ctx, receiver)
        ctx.platform(weeklyTokenBudget=0)  # every run request ends skipped: a notification
        model = ctx.model("m")
        names = [f"w{n:02d}" for n in range(4)]
        for name in names:
            ctx.agent(name, "Say hello.", model)
        ctx.agent_ids(names)

        # Up: the first notifications go at once.
        for name in names[:2]:
            ctx.request(name)
        wait_for(lambda: len(receiver.accepted()) >= 2, 60, what="the first two notifications")

        # Down: notifications keep coming, one every few seconds, spread over the outage.
        receiver.stop()
        down_at = time.monotonic()
        spacing = outage / (during + 1)
        made = 0

        def produce() -> None:
            nonlocal made
            if made < during and time.monotonic() - down_at >= spacing * (made + 1):
                ctx.request(names[made % len(names)])
                made += 1

        hold(outage, check=produce)
        while made < during:  # (a slow request loop: the rest now)
            ctx.request(names[made % len(names)])
            made += 1
        total = 3 + during  # the failed run's, the first two skips', the outage's
        wait_for(
            lambda: len(_outbox(ctx)) == total, 60, what=f"{total} notifications in the outbox"
        )
        pending = [row for row in _outbox(ctx) if row["state"] == "pending"]
        r.check(len(receiver.requests()) == 3, "the receiver got requests while it was down")
        r.check(len(pending) == during, f"{len(pending)} of {during} pending during the outage")
        tried = [row for row in pending if int(str(row["attempts"])) > 0]
        r.figures["attempts_during_outage"] = sum(int(str(row["attempts"])) for row in pending)
        r.check(bool(tried), "no delivery was attempted during the outage")

        # Back: everything delivered.
        receiver.start()
        back_at = time.monotonic()

        def all_delivered() -> bool:
            rows = _outbox(ctx)
            return len(rows) == total and all(row["state"] == "delivered" for row in rows)

        wait_for(all_delivered, DELIVERED_TIMEOUT, what="every notification delivered", interval=2)
        r.figures["seconds_to_deliver_after_return"] = round(time.monotonic() - back_at, 1)
        rows = _outbox(ctx)
        sent = {str(row["delivery_id"]) for row in rows}
        accepted = receiver.accepted()
        got = [str(request.delivery_id) for request in accepted]
        r.check(
            set(got) == sent,
            f"lost: {sorted(sent - set(got))[:5]}; made up: {sorted(set(got) - sent)[:5]}",
        )
        r.check(
            all(
                request.body and request.body.get("id") == request.delivery_id
                for request in accepted
            ),
            "a body's id differs from its delivery id header",
        )
        forged = [request for request in receiver.requests() if request.signature_error]
        r.check(not forged, f"deliveries with a bad signature: {forged[:3]}")
        r.figures["notifications"] = len(sent)
        r.figures["duplicates"] = len(got) - len(set(got))
        r.figures["kinds"] = sorted({str(row["kind"]) for row in rows})
        r.figure = (
            f"{len(sent)} notifications, all delivered"
            f" {r.figures['seconds_to_deliver_after_return']:.0f}s after the return;"
            f" {r.figures['duplicates']} sent twice; {r.figures['attempts_during_outage']}"
            " attempts refused while down"
        )
        ctx.check_journal()
        ctx.check_operators_alive([op])
    finally:
        receiver.stop()
        try:
            _set_webhook(ctx, None)
        finally:
            _delete_secret(ctx)


def _delete_secret(ctx: Context) -> None:
    try:
        ctx.kube.core.delete_namespaced_secret(SECRET_NAME, RUNS_NAMESPACE)
    except client.exceptions.ApiException as error:
        if error.status != 404:
            raise
