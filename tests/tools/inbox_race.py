"""The parallel-writers check of the inbox rules, run from a shell against a scratch database.

    python -m tests.tools.inbox_race --database-url URL [--writers 32] [--rounds 5] ...

It creates a throw-away owner with agents and blocked questions in the given
database, runs rounds of simultaneous writers (inbox and chat replies, takes,
crashes after a take, acknowledgements, re-asks, compare-and-swap advances),
checks every writer's result and the final rows against the inbox rules
(`tests.tools.inbox_history`), removes the owner again, and exits 1 if any rule
was broken. With `--replies-via-cli`, every human reply is a separate
`achilles inbox reply --json` process, so the command line is raced too.

It writes and deletes users, so it refuses (exit 2) any database whose name does not
say it is a scratch one: the name must start with `achilles_test` or contain `scratch`.
Run it from the repository root (it is test code, not part of the product).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

import click

from achilles.cli.common import CommandFailed, database_url_option, echo_json, reports_errors
from achilles.domain.inbox import ItemState, ReplyChannel
from tests.tools.inbox_history import Event, Op

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tests.tools.inbox_writers import ReplyWriter

SCRATCH_PREFIX = "achilles_test"
SCRATCH_MARK = "scratch"
_REPLY_TIMEOUT_S = 300


def cli_reply_writer(database_url: str) -> ReplyWriter:
    """Human replies through the real command line, one process per reply."""

    def write(
        session: Session, agent_id: int, item_id: int, text: str, channel: ReplyChannel
    ) -> Event:
        argv = [sys.executable, "-m", "achilles", "inbox", "reply", str(item_id)]
        argv += ["--text", text, "--channel", channel.value, "--json"]
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=_REPLY_TIMEOUT_S,
            check=False,
            env={**os.environ, "ACHILLES_DATABASE_URL": database_url, "KUBECONFIG": os.devnull},
        )
        if done.returncode not in (0, 3):
            raise RuntimeError(f"achilles inbox reply exited {done.returncode}: {done.stderr}")
        result = json.loads(done.stdout)
        accepted = bool(result["accepted"])
        if accepted != (done.returncode == 0):
            raise RuntimeError(f"exit code {done.returncode} disagrees with {result}")
        item = result["item"]
        return Event(
            op=Op.INBOX_REPLY if channel is ReplyChannel.INBOX else Op.CHAT_REPLY,
            item_id=item_id,
            agent_id=agent_id,
            ok=accepted,
            revision=item["revision"] if accepted else None,
            board_version=result["board_version"] if accepted else None,
            serial=item["reply_serial"],
            text=text,
            state=ItemState(item["state"]),
            detail="" if accepted else "refused (exit 3)",
        )

    return write


def is_scratch_database(name: str | None) -> bool:
    """Whether a database's name clearly marks it as disposable."""
    return name is not None and (name.startswith(SCRATCH_PREFIX) or SCRATCH_MARK in name)


def require_scratch_database(url: str) -> None:
    from achilles.db.database import parse_url

    name = parse_url(url).database
    if not is_scratch_database(name):
        raise click.UsageError(
            f"refusing to race database {name!r}: the race creates and deletes users, so it"
            f" runs only on a scratch database (its name must start with {SCRATCH_PREFIX!r}"
            f" or contain {SCRATCH_MARK!r})"
        )


@click.command("inbox_race")
@database_url_option
@click.option("--writers", default=32, show_default=True, type=click.IntRange(2, 250))
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--agents", default=4, show_default=True, type=click.IntRange(1, 100))
@click.option("--items-per-agent", default=2, show_default=True, type=click.IntRange(1, 100))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--replies-via-cli", is_flag=True, help="Each reply is an `achilles inbox reply`.")
@click.option("--keep", is_flag=True, help="Leave the race's owner, agents and items in place.")
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def race(
    database_url: str | None,
    writers: int,
    rounds: int,
    agents: int,
    items_per_agent: int,
    seed: int,
    replies_via_cli: bool,
    keep: bool,
    as_json: bool,
) -> None:
    """Race parallel inbox writers against a scratch database and check the rules
    (exit 1: a rule broke; exit 2: not a scratch database)."""
    from achilles.db.database import Database
    from achilles.db.url_text import database_url_from_env
    from tests.tools.inbox_writers import prepare_board, remove_owner, run_race

    url = database_url or database_url_from_env()
    require_scratch_database(url)
    database = Database(url, pool_size=writers + 2)
    engine = database.engine
    with database.connection_errors():
        owner, agent_ids = prepare_board(engine, agents=agents, items_per_agent=items_per_agent)
        try:
            report = run_race(
                engine,
                agent_ids,
                writers=writers,
                rounds=rounds,
                seed=seed,
                reply_writer=cli_reply_writer(url) if replies_via_cli else None,
            )
        finally:
            if not keep:
                remove_owner(engine, owner)
    outcomes = Counter(f"{e.op.value} {_outcome(e)}" for e in report.events)
    summary: dict[str, Any] = {
        "owner": owner,
        "kept": keep,
        "agents": agent_ids,
        "items": report.items,
        "writers": writers,
        "rounds": rounds,
        "operations": len(report.events),
        "outcomes": dict(sorted(outcomes.items())),
        "unprocessed_replies": sorted(report.unprocessed),
        "problems": report.problems,
    }
    if as_json:
        echo_json(summary)
    else:
        click.echo(
            f"{len(report.events)} operations by {writers} parallel writers in {rounds} rounds"
            f" on {len(report.items)} items of {len(agent_ids)} agents"
        )
        for name, count in summary["outcomes"].items():
            click.echo(f"  {count:6}  {name}")
        for problem in report.problems:
            click.echo(f"VIOLATION: {problem}")
    if report.problems:
        raise CommandFailed(f"{len(report.problems)} rule violation(s)")
    if not as_json:
        click.echo("all inbox rules held")


def _outcome(event: Event) -> str:
    if event.op is Op.ACK:
        return event.detail
    if event.op is Op.ADVANCE and not event.ok:
        return f"refused ({event.detail})"
    if event.op is Op.TAKE:
        return ("taken" if event.ok else "nothing to take") + (
            " then crashed" if "crash" in event.detail and event.ok else ""
        )
    return "written" if event.ok else "refused"


if __name__ == "__main__":
    race()
