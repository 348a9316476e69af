"""`achilles budget`: an owner's weekly token use against the platform limit."""

from __future__ import annotations

import click

from achilles.cli.common import UserKey, database_url_option, echo_json, reports_errors
from achilles.domain.timestamps import iso_utc


@click.group()
def budget() -> None:
    """Weekly token budgets (derived from the run journal)."""


@budget.command("show")
@database_url_option
@click.option(
    "--owner", required=True, type=UserKey(), metavar="USER", help="The owner's user key."
)
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def show(database_url: str | None, owner: str, as_json: bool) -> None:
    """This week's usage of OWNER (all their agents) against the weekly limit."""
    from achilles.cli.common import open_database
    from achilles.services.journal_reads import weekly_budget

    status = weekly_budget(open_database(database_url), owner)
    record = {
        "owner": status.owner,
        "used": status.used,
        "limit": status.limit,
        "remaining": status.remaining,
        "exhausted": status.exhausted,
        "timezone": status.timezone,
        "week_start": iso_utc(status.window.start),
        "week_end": iso_utc(status.window.end),
    }
    if as_json:
        echo_json(record)
        return
    state = "EXHAUSTED" if status.exhausted else f"{status.remaining} left"
    click.echo(f"{owner}: {status.used} / {status.limit} tokens this week ({state})")
    click.echo(f"week: {record['week_start']} .. {record['week_end']} ({status.timezone})")
