"""`achilles runs`: read the run journal; enqueue or cancel a run directly in the database."""

from __future__ import annotations

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
    from achilles.services.journal_reads import OwnedRun, RunTrace, StepRow


@click.group()
def runs() -> None:
    """The run journal (agent_runs)."""


def _as_dict(found: OwnedRun) -> dict[str, Any]:
    """A run as `runs list` and `runs show` print it (their JSON's keys, in this order)."""
    run = found.run
    return {
        "id": run.id,
        "agent_id": found.agent.id,
        "agent": found.agent.name,
        "trigger": run.trigger,
        "state": run.state,
        "reason": run.reason,
        "tokens_used": run.tokens_used,
        "error": run.error,
        "output": run.output,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "heartbeat_at": run.heartbeat_at,
    }


@runs.command("list")
@database_url_option
@click.option(
    "--agent",
    "agent_ref",
    metavar="ID|NAME",
    help="Only this agent's runs (or its Agent's namespace/name).",
)
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
    from achilles.services.journal_reads import RunFilter, runs_page

    runs = runs_page(
        open_database(database_url),
        RunFilter(states=tuple(RunState(s).value for s in states)),
        owner_key=None,  # the CLI is the platform operator's: every owner's runs
        agent_ref=agent_ref,
        limit=limit,
        output_chars=None,
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
@click.option(
    "--steps", "with_steps", is_flag=True, help="Also its steps: model calls, tool calls, asks."
)
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def show_run(database_url: str | None, run_id: int, with_steps: bool, as_json: bool) -> None:
    """One run with its output and error, and what it used (model, endpoint, prompt
    digest, tools offered); `--steps` lists its steps as they happened."""
    from achilles.cli.common import open_database
    from achilles.services.journal_reads import run_and_trace, step_record

    found, trace = run_and_trace(
        open_database(database_url), run_id, owner_key=None, steps=with_steps
    )
    record = _as_dict(found)
    if as_json:
        record["used"] = _used_dict(trace)
        if with_steps:
            record["steps"] = [step_record(step) for step in trace.steps]
        echo_json(record)
        return
    for key, value in record.items():
        if key != "output":
            shown = iso_utc(value) if hasattr(value, "tzinfo") else value
            click.echo(f"{key + ':':14}{'' if shown is None else shown}")
    for key, value in _used_lines(trace):
        click.echo(f"{key + ':':14}{value}")
    click.echo("output:")
    click.echo(record["output"] or "")
    if with_steps:
        click.echo(f"steps: {len(trace.steps)}")
        if trace.steps:
            echo_table(STEP_COLUMNS, [_step_cells(step) for step in trace.steps])


def _used_dict(trace: RunTrace) -> dict[str, Any] | None:
    used = trace.used
    if used is None:
        return None
    return {
        "model": used.model,
        "endpoint_host": used.endpoint_host,
        "provider_model": used.provider_model,
        "prompt_sha256": used.prompt_digest_hex,
        "tools": list(used.tools),
    }


def _used_lines(trace: RunTrace) -> list[tuple[str, str]]:
    used = trace.used
    if used is None:
        return [("used model", "")]
    return [
        ("used model", f"{used.model} ({used.provider_model} at {used.endpoint_host})"),
        ("used prompt", f"sha256:{used.prompt_digest_hex}"),
        ("used tools", ", ".join(used.tools)),
    ]


STEP_COLUMNS = ["seq", "kind", "started", "ms", "model/tool", "in/out", "finish/status", "error"]


def _step_cells(step: StepRow) -> list[str]:
    if step.kind == "model_call":
        what = step.model or ""
        sizes = f"{_count(step.input_tokens)}/{_count(step.output_tokens)} tok"
        outcome = step.finish_reason or ""
    elif step.kind == "truncated":
        what, sizes, outcome = "(later steps not kept)", "", ""
    else:
        what = step.tool or ""
        sizes = f"{_count(step.argument_bytes)}/{_count(step.result_bytes)} B"
        outcome = step.status or ""
    return [
        str(step.seq),
        step.kind,
        iso_utc(step.started_at) or "",
        f"{step.latency_ms:.1f}",
        what,
        sizes,
        outcome,
        (step.error or "").replace("\n", " "),
    ]


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


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


@runs.command("cancel")
@database_url_option
@click.argument("run_id", metavar="RUN", type=WholeNumber(min=1))
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def cancel(database_url: str | None, run_id: int, as_json: bool) -> None:
    """Cancel RUN (queued or running): it ends failed/cancelled, its runner stops
    writing, and the operator deletes its Job and pod (at its next sweep, within 30 s).

    Idempotent: a run that ended already is left as it is, and this says how it ended
    (exit 0 either way). A run that does not exist exits 1. Owners cancel through their
    Agent's `achilles.io/cancel-run` annotation (the portal) or the HTTP API.
    """
    import getpass

    from achilles.cli.common import open_database
    from achilles.services import run_cancel

    outcome = run_cancel.cancel_run(
        open_database(database_url),
        run_cancel.CancelRequest(run_id, f"{getpass.getuser()} (achilles runs cancel)"),
    )
    if as_json:
        echo_json(
            {
                "run_id": outcome.run_id,
                "cancelled": outcome.cancelled,
                "state": outcome.state,
                "reason": outcome.reason,
            }
        )
    else:
        click.echo(run_cancel.describe(outcome))
