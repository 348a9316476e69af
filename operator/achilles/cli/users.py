"""`achilles users`: owners, for standalone installs that have no Auth service."""

from __future__ import annotations

import click

from achilles.cli.common import UserKey, database_url_option, reports_errors


@click.group()
def users() -> None:
    """Users who own agents."""


@users.command("upsert")
@database_url_option
@click.argument("key", metavar="USER", type=UserKey())
@click.option(
    "--timezone", metavar="TZ", help="IANA zone for calendar slots (default: the organisation's)."
)
@click.option("--inactive", is_flag=True, help="Deactivate: the user's agents are switched off.")
@reports_errors
def upsert(database_url: str | None, key: str, timezone: str | None, inactive: bool) -> None:
    """Create or update USER. Without --timezone an existing zone is kept.

    Deactivating writes enabled=false on the user's agents (no third lock);
    reactivating does not switch them back on: that is the owner's choice.
    """
    from achilles.cli.common import open_database
    from achilles.domain.timezones import load_timezone
    from achilles.services.users import upsert_user

    if timezone is not None:
        load_timezone(timezone, field="--timezone")
    result = upsert_user(open_database(database_url), key, timezone=timezone, active=not inactive)
    verb = "created" if result.created else "updated" if result.changed else "unchanged"
    status = "inactive" if inactive else "active"
    click.echo(f"user {key} {verb} ({status})")
    if result.agents_disabled:
        click.echo(f"switched off {result.agents_disabled} agent(s) of {key}")
