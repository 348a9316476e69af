"""`achilles runs`: read the run journal, and enqueue a run directly in the database."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click

from achilles.cli.common import (
    WholeNumber,
    database_url_option,
    echo_json,
    echo_table,
    reports_errors,
)
from achilles.domain.runs import RunState, RunTrigger
from achilles.domain.timestamps import iso_utc

if TYPE_CHECKING:
    from achilles.services.journal_queries import RunRecord


@click.group()
def runs() -> None:
    """The run journal (agent_runs)."""


def _as_dict(run: RunRecord) -> dict[str, Any]:
    return dataclasses.asdict(run)


@runs.command("list")
@database_url_option
@click.option("--agent", "agent_ref", metavar="ID|NAME", help="Only this agent's runs.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in RunState]),
    help="Only runs in this state (repeatable).",
)
@click.option("--limit", default=50, show_default=True, type=WholeNumber(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@reports_errors
def list_runs(
    database_url: str | None,
    agent_ref: str | None,
    states: tuple[str, ...],
    limit: int,
    as_json: bool,
) -> None:
    """List runs, newest first; skipped runs too (they are rows of the journal).

    Run ids come from one sequence and may skip numbers: an insert that does not keep its
    row still uses one (a run skipped because another is active is first refused as a
    queued row, then written as skipped under the next number; a run request seen twice).
    """
    from achilles.cli.common import open_database
    from achilles.services.journal_queries import list_runs

    runs = list_runs(
        open_database(database_url),
        agent_ref=agent_ref,
        states=tuple(RunState(s) for s in states),
        limit=limit,
    )
    records = [_as_dict(run) for run in runs]
    if as_json:
        echo_json(records)
        return
    echo_table(
        ["id", "agent", "trigger", "state", "reason", "tokens", "created", "finished"],
        [
            [
                str(r["id"]),
                r["agent"],
                r["trigger"],
                r["state"],
                r["reason"] or "",
                str(r["tokens_used"]),
                iso_utc(r["created_at"]) or "",
                iso_utc(r["finished_at"]) or "",
            ]
            for r in records
        ],
    )


@runs.command("show")
@database_url_option
@click.argument("run_id", type=WholeNumber(min=1))
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def show_run(database_url: str | None, run_id: int, as_json: bool) -> None:
    """One run with its output and error."""
    from achilles.cli.common import open_database
    from achilles.services.journal_queries import get_run

    record = _as_dict(get_run(open_database(database_url), run_id))
    if as_json:
        echo_json(record)
        return
    for key, value in record.items():
        if key != "output":
            shown = iso_utc(value) if hasattr(value, "tzinfo") else value
            click.echo(f"{key + ':':14}{'' if shown is None else shown}")
    click.echo("output:")
    click.echo(record["output"] or "")


@runs.command("enqueue")
@database_url_option
@click.argument("agent_ref", metavar="AGENT")
@click.option(
    "--trigger",
    type=click.Choice([t.value for t in RunTrigger]),
    default=RunTrigger.MANUAL.value,
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def enqueue(database_url: str | None, agent_ref: str, trigger: str, as_json: bool) -> None:
    """Ask for a run through the start gates, directly in the database.

    On a cluster, people request a run with the Agent's
    `achilles.io/run-requested-at` annotation instead; this is for standalone
    installs and operations. A closed durable lock exits 1 and writes no row; a
    run skipped by a runtime gate is recorded and exits 0.
    """
    from achilles.cli.common import open_database
    from achilles.services.run_requests import enqueue_run

    result = enqueue_run(open_database(database_url), agent_ref, RunTrigger(trigger))
    record = {"run_id": result.run_id, "state": result.state, "reason": result.reason}
    if as_json:
        echo_json(record)
    else:
        suffix = f" ({result.reason})" if result.reason else ""
        click.echo(f"run {result.run_id}: {result.state}{suffix}")
