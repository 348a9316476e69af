"""`achilles notifications`: the webhook's outbox as admins read it (docs/operator.md)."""

from __future__ import annotations

import click

from achilles.cli.common import database_url_option, echo_json, reports_errors
from achilles.domain.timestamps import iso_utc


@click.group()
def notifications() -> None:
    """Notifications to the platform's webhook (the outbox)."""


@notifications.command("list")
@database_url_option
@click.option("--dead", is_flag=True, help="Only the notifications given up (dead).")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True, help="Rows.")
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def list_command(database_url: str | None, dead: bool, limit: int, as_json: bool) -> None:
    """The newest notifications: delivery id, type, state, attempts, last error."""
    from achilles.cli.common import open_database
    from achilles.services.notifications import list_outbox

    rows = list_outbox(open_database(database_url), dead_only=dead, limit=limit)
    records = [
        {
            "delivery_id": str(row.delivery_id),
            "type": row.kind,
            "state": row.state,
            "attempts": row.attempts,
            "created_at": iso_utc(row.created_at),
            "next_attempt_at": iso_utc(row.next_attempt_at) if row.state == "pending" else None,
            "delivered_at": iso_utc(row.delivered_at),
            "last_error": row.last_error,
            "data": row.payload,
        }
        for row in rows
    ]
    if as_json:
        echo_json(records)
        return
    if not records:
        click.echo("no dead notifications" if dead else "no notifications")
        return
    for record in records:
        line = (
            f"{record['delivery_id']}  {record['type']:<24} {record['state']:<9}"
            f" attempts={record['attempts']}  created={record['created_at']}"
        )
        click.echo(line)
        if record["last_error"]:
            click.echo(f"    last error: {record['last_error']}")


@notifications.command("retry")
@database_url_option
@reports_errors
def retry_command(database_url: str | None) -> None:
    """Send every dead notification again (once the receiver is fixed)."""
    from achilles.cli.common import open_database
    from achilles.services.notifications import retry_dead_notifications

    count = retry_dead_notifications(open_database(database_url))
    click.echo(f"{count} dead notification(s) pending again")
