"""Faults of what the engine stands on: PostgreSQL restarted and away for 60 s mid-run, the
API server killed mid-dispatch."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from achilles_chaos import models
from achilles_chaos.operator import STALE_AFTER_SECONDS, OperatorProcess
from achilles_chaos.scenario import Context
from achilles_chaos.waiting import hold, wait_for

START_TIMEOUT = 240.0
OUTAGE_SECONDS = 60.0


# The loops that pass on a tick (the watchers' passes last a whole watch, minutes).
TICKING_LOOPS = ("scheduler", "dispatcher", "sweeper", "status")
# What a clear error of a run cut off by the outage names.
OUTAGE_WORDS = ("database", "connection", "operationalerror", "exited with code")


def _loops_recovered(op: OperatorProcess, since: float) -> bool:
    """Every ticking loop of the operator completed a pass after `since` (monotonic):
    an idle loop passes only at its own tick, so "recently" would say nothing."""
    health = op.health() or {}
    loops = health.get("loops")
    if not isinstance(loops, dict):
        return False
    elapsed = time.monotonic() - since
    return all(float(loops.get(loop, elapsed)) < elapsed for loop in TICKING_LOOPS)


def postgres_outage(ctx: Context) -> None:
    """PostgreSQL stopped mid-run (every connection cut) and away for 60 s, then started:
    no crash loop, every run in flight ends with a clear state, no false stale."""
    r = ctx.result
    r.injected = f"PostgreSQL stopped mid-run for {OUTAGE_SECONDS:.0f}s, then started again"
    op = ctx.operator()
    model = ctx.model("m")
    outlast = [f"outlast-{i}" for i in range(2 if ctx.quick else 4)]
    during = [f"during-{i}" for i in range(1 if ctx.quick else 2)]
    for name in outlast:
        ctx.agent(name, models.held(90).prompt(), model)  # the model answers after the outage
    for name in during:
        ctx.agent(name, models.held(40).prompt(), model)  # the model answers during it
    # Asked for a run while the database is away: the handling fails, and only the
    # handler's retry (the object read again when it fires) can answer it.
    asked = "asked-during"
    ctx.agent(asked, models.QUICK.prompt(), model)
    ids = ctx.agent_ids([*outlast, *during])
    asked_id = ctx.agent_ids([asked])[asked]
    before = ctx.last_run_id()
    for name in ids:
        ctx.request(name)
    runs = ctx.new_runs(ids.values(), before, 60)
    ctx.wait_running(runs.values(), START_TIMEOUT)
    down_at = datetime.now(UTC)
    before_asked = ctx.last_run_id()
    ctx.cluster.stop_postgres()
    ctx.request(asked)
    exits: list[int | None] = []

    def operator_alive() -> None:
        if not op.alive():
            exits.append(op.exit_code())

    try:
        hold(OUTAGE_SECONDS, check=operator_alive)
    finally:
        ctx.cluster.start_postgres()
    up = time.monotonic()
    r.check(not exits, f"the operator exited during the outage: {exits}\n{op.log_tail()}")
    wait_for(
        lambda: _loops_recovered(op, up), 120, what="the operator's loops to pass again", interval=1
    )
    recovered = time.monotonic() - up
    asked_run = ctx.new_runs([asked_id], before_asked, 120)
    ended = ctx.wait_ended(runs.values(), START_TIMEOUT, "every run in flight to end")
    asked_row = ctx.wait_ended(asked_run.values(), START_TIMEOUT, "the run asked mid-outage")
    r.check(
        all(row["state"] == "succeeded" for row in asked_row.values()),
        f"the run requested during the outage did not succeed: {asked_row}",
    )
    by_name = {name: ended[runs[agent_id]] for name, agent_id in ids.items()}
    for name in outlast:
        row = by_name[name]
        r.check(
            row["state"] == "succeeded",
            f"{name} (model answered after the outage) ended {row['state']}/{row['reason']}:"
            f" {row['error']}",
        )
    for name in during:
        row = by_name[name]
        error = (row["error"] or "").lower()
        r.check(
            row["state"] == "succeeded"
            or (row["reason"] == "error" and any(word in error for word in OUTAGE_WORDS)),
            f"{name} (model answered during the outage) ended {row['state']}/{row['reason']}"
            f" without naming the cause: {row['error']!r}",
        )
        r.note(f"{name}: {row['state']}/{row['reason']}: {row['error']}")
    stale = [name for name, row in by_name.items() if row["reason"] == "stale"]
    r.check(not stale, f"runs reaped as stale because of the outage: {stale}")
    # Afterwards the engine works as before.
    name = outlast[0]
    ctx.set_prompt(name, models.QUICK.prompt())
    ctx.wait_prompt(ids[name], models.QUICK.prompt())
    after = ctx.last_run_id()
    ctx.request(name)
    fresh = ctx.new_runs([ids[name]], after, 60)
    fresh_row = ctx.wait_ended(fresh.values(), START_TIMEOUT, "a run after the outage")
    r.check(
        all(row["state"] == "succeeded" for row in fresh_row.values()),
        f"the first run after the outage did not succeed: {fresh_row}",
    )
    r.check(op.starts == 1 and op.alive(), "the operator restarted or died")
    errors = op.metric("achilles_loop_errors_total")
    r.figures.update(
        outage_seconds=OUTAGE_SECONDS,
        loops_recovered_seconds=recovered,
        loop_errors=errors,
        outcomes={n: f"{row['state']}/{row['reason']}" for n, row in by_name.items()},
        down_at=down_at.isoformat(),
    )
    r.figure = (
        f"operator up throughout, loops passing {recovered:.0f}s after PostgreSQL returned; "
        f"{sum(by_name[n]['state'] == 'succeeded' for n in outlast)}/{len(outlast)} runs spanning "
        "the outage succeeded, the run asked during it ran after it, "
        f"{len(stale)} false stale (threshold {STALE_AFTER_SECONDS}s); "
        f"runs answered mid-outage: "
        + ", ".join(f"{by_name[n]['state']}/{by_name[n]['reason']}" for n in during)
    )
    ctx.check_journal()
    ctx.check_jobs([*runs.values(), *fresh.values(), *asked_run.values()])
    ctx.check_status([*outlast, *during])


def apiserver_restart(ctx: Context) -> None:
    """kube-apiserver SIGKILLed right after the first Job of a burst was created, then
    started again: no duplicate Job, dispatch resumes, every run ends once."""
    r = ctx.result
    count = 8 if ctx.quick else 16
    r.injected = f"kube-apiserver SIGKILLed mid-dispatch of {count} runs, then restarted"
    op = ctx.operator()
    ctx.platform(maxConcurrency=count)
    model = ctx.model("m")
    names = [f"burst-{i:02d}" for i in range(count)]
    for name in names:
        ctx.agent(name, models.QUICK.prompt(), model)
    ids = ctx.agent_ids(names)
    before = ctx.last_run_id()
    jobs_before = set(ctx.kube.job_run_ids())
    for name in names:
        ctx.request(name)
    wait_for(
        lambda: set(ctx.kube.job_run_ids()) - jobs_before,
        120,
        what="the first Job of the burst",
        interval=0.05,
    )
    ctx.cluster.kill_apiserver()
    killed_at = time.monotonic()
    at_kill = ctx.journal.scalar(
        "SELECT count(*) FROM agent_runs WHERE id > %s AND dispatched_at IS NOT NULL", (before,)
    )
    ctx.cluster.start_apiserver()
    downtime = time.monotonic() - killed_at
    runs = ctx.new_runs(ids.values(), before, 120)
    ended = ctx.wait_ended(runs.values(), START_TIMEOUT, "every run of the burst to end")
    drained = time.monotonic() - killed_at
    not_ok = {
        run: f"{row['state']}/{row['reason']}: {row['error']}"
        for run, row in ended.items()
        if row["state"] != "succeeded"
    }
    r.check(not not_ok, f"runs that did not succeed: {not_ok}")
    every = ctx.journal.rows(
        "SELECT agent_id, count(*) AS n FROM agent_runs WHERE id > %s GROUP BY agent_id",
        (before,),
    )
    r.check(all(row["n"] == 1 for row in every), f"an agent got two runs: {every}")
    job_ids = [run for run in ctx.kube.job_run_ids() if run in set(runs.values())]
    r.check(
        sorted(job_ids) == sorted(runs.values()),
        f"Jobs {sorted(job_ids)} for runs {sorted(runs.values())}",
    )
    ctx.check_jobs(runs.values())
    r.check(op.alive(), f"the operator exited: {op.log_tail()}")
    r.figures.update(dispatched_at_kill=at_kill, restart_seconds=downtime, drained_seconds=drained)
    r.figure = (
        f"killed with {at_kill}/{count} dispatched; API server down {downtime:.0f}s; all "
        f"{len(ended)} runs ended in {drained:.0f}s, {len(not_ok)} not succeeded, one Job each"
    )
    ctx.check_journal()
    ctx.check_status(names)
