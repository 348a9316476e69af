"""Faults of the operator itself: two replicas without peering on 1,000 due agents and
SIGKILL mid-dispatch ten times (its downtime while slots pass: `downtime.py`)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from achilles_chaos import models
from achilles_chaos.journal import Row
from achilles_chaos.sampling import Sampler
from achilles_chaos.scenario import Context
from achilles_chaos.waiting import ChaosTimeout, timed, wait_for

START_TIMEOUT = 240.0


def create_agents(ctx: Context, names: list[str], prompt: str, model: str, **spec: Any) -> None:
    with timed(f"create {len(names)} Agents"), ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda name: ctx.agent(name, prompt, model, **spec), names))


def slots_ready(ctx: Context, count: int, timeout: float) -> None:
    wait_for(
        lambda: (
            ctx.journal.scalar(
                "SELECT count(*) FROM agents WHERE cr_namespace = %s AND next_run_at IS NOT NULL",
                (ctx.namespace,),
            )
            == count
        ),
        timeout,
        what=f"{count} agents with a slot",
        interval=1,
    )


class _CapSampler(Sampler):
    """Executing runs as the cap counts them (running, or queued with a Job), sampled."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, name="chaos-cap", every=0.1)
        self.max_running = 0
        self.max_executing = 0

    def _run(self) -> None:
        try:
            with self.ctx.journal.connect() as conn:
                for _ in self._ticks():
                    row = conn.execute(
                        b"SELECT count(*) FILTER (WHERE state = 'running') AS running,"
                        b" count(*) FILTER (WHERE state = 'running'"
                        b"  OR (state = 'queued' AND dispatched_at IS NOT NULL)) AS executing"
                        b" FROM agent_runs"
                    ).fetchone()
                    assert row is not None
                    self.max_running = max(self.max_running, int(row["running"]))
                    self.max_executing = max(self.max_executing, int(row["executing"]))
                    self.samples += 1
        except psycopg.Error:
            return


def double_leader(ctx: Context) -> None:
    """Two replicas, no peering, both leading: 1,000 agents due at once."""
    r = ctx.result
    count, cap = (100, 6) if ctx.quick else (1000, 10)
    window = 90.0 if ctx.quick else 150.0
    r.injected = f"2 operator replicas without peering; {count} agents due at once; cap {cap}"
    boot = ctx.operator("boot")
    ctx.platform(maxConcurrency=cap)
    model = ctx.model("m")
    names = [f"due-{i:04d}" for i in range(count)]
    created = time.monotonic()
    create_agents(
        ctx, names, models.QUICK.prompt(), model, schedule={"type": "interval", "everyHours": 24}
    )
    slots_ready(ctx, count, 600)
    r.note(f"{count} Agents created and reconciled in {time.monotonic() - created:.0f}s")
    boot.stop()
    # The slot arrives for all of them at once (the clock, through next_run_at).
    ctx.journal.execute(
        "UPDATE agents SET next_run_at = now() - interval '1 second' WHERE cr_namespace = %s",
        (ctx.namespace,),
    )
    sampler = _CapSampler(ctx)
    sampler.start()
    replicas = [ctx.operator("a"), ctx.operator("b")]
    started = time.monotonic()
    try:
        rows = ctx.wait_runs(
            lambda rows: len(rows) >= count, 300, f"{count} scheduled runs to be enqueued"
        )
        enqueued_after = time.monotonic() - started
        all_visible_at = ctx.journal.now()
        # Five turns of the cap: enough to see FIFO and the cap hold while runs come and go
        # (on two cores some 0.5 runs end per second, the runners starting on them).
        target = 40 if ctx.quick else 50
        try:
            rows = ctx.wait_runs(
                lambda rows: sum(row["state"] in ("succeeded", "failed") for row in rows) >= target,
                window,
                f"{target} runs to end",
            )
        except ChaosTimeout:
            rows = ctx.runs()  # the window closed: judge what ran in it
        jobs_by = {p.name: p.metric("achilles_jobs_created_total") for p in replicas}
        ctx.check_operators_alive(replicas)
    finally:
        for process in replicas:
            process.stop()
        sampler.stop()
    per_agent: dict[int, int] = {}
    for row in rows:
        per_agent[row["agent_id"]] = per_agent.get(row["agent_id"], 0) + 1
    doubled = {agent: n for agent, n in per_agent.items() if n > 1}
    r.check(len(per_agent) == count, f"{count - len(per_agent)} agents got no run")
    r.check(not doubled, f"agents with more than one run for one slot: {list(doubled)[:10]}")
    r.check(all(row["trigger"] == "scheduled" for row in rows), "a run not scheduled")
    future = ctx.journal.scalar(
        "SELECT count(*) FROM agents WHERE cr_namespace = %s AND next_run_at > now()",
        (ctx.namespace,),
    )
    r.check(future == count, f"{count - int(future)} agents' next slot did not advance")
    ended = [row for row in rows if row["state"] in ("succeeded", "failed")]
    failed = [(row["id"], row["error"]) for row in ended if row["state"] != "succeeded"]
    r.check(not failed, f"runs failed: {failed[:5]}")
    r.check(sampler.max_running <= cap, f"{sampler.max_running} runs running at once > cap {cap}")
    r.check(
        sampler.max_executing <= cap,
        f"{sampler.max_executing} runs executing (running or dispatched) > cap {cap}",
    )
    r.check(
        sampler.max_executing == cap, f"the cap {cap} was never reached ({sampler.max_executing})"
    )
    r.check(all(v > 0 for v in jobs_by.values()), f"a replica created no Job: {jobs_by}")
    _check_fifo(ctx, rows, all_visible_at)
    dispatched = [row["id"] for row in rows if row["dispatched_at"] is not None]
    ctx.check_jobs(dispatched)
    job_ids = ctx.kube.job_run_ids()
    r.check(len(job_ids) == len(set(job_ids)), "two Jobs for one run")
    r.figures.update(
        agents=count,
        runs=len(rows),
        duplicates=len(doubled),
        enqueued_seconds=enqueued_after,
        ended=len(ended),
        jobs_created_by=jobs_by,
        max_running=sampler.max_running,
        max_executing=sampler.max_executing,
        samples=sampler.samples,
    )
    r.figure = (
        f"{len(rows)} runs for {count} agents (0 dup? {not doubled}) in {enqueued_after:.0f}s; "
        f"{len(ended)} ran, Jobs by replica {sorted(int(v) for v in jobs_by.values())}; max "
        f"executing {sampler.max_executing}/{cap} over {sampler.samples} samples"
    )
    ctx.check_journal(settled=False)


def _check_fifo(ctx: Context, rows: list[Row], all_visible_at: Any) -> None:
    """Dispatch is FIFO: the runs given a Job are the oldest ones.

    FIFO is among the runs a dispatcher can see. While the two replicas' schedulers enqueue
    at once, a batch's rows carry its transaction's start as `created_at` but appear only
    at its commit, so a dispatcher rightly starts runs of a batch that committed first.
    Judged are the runs dispatched once every run was visible (`all_visible_at`)."""
    ordered = sorted(rows, key=lambda row: (row["created_at"], row["id"]))
    judged = [
        row
        for row in ordered
        if row["dispatched_at"] is None or row["dispatched_at"] > all_visible_at
    ]
    dispatched = [
        row["dispatched_at"] is not None or row["started_at"] is not None for row in judged
    ]
    first_waiting = dispatched.index(False) if False in dispatched else len(dispatched)
    late = [
        row for row, d in zip(judged[first_waiting:], dispatched[first_waiting:], strict=True) if d
    ]
    if late:
        waiting = judged[first_waiting]
        ctx.result.check(
            False,
            f"runs dispatched ahead of older queued ones: {[row['id'] for row in late[:10]]}"
            f" (run {late[0]['id']} created {late[0]['created_at']}, dispatched"
            f" {late[0]['dispatched_at']}; run {waiting['id']} created"
            f" {waiting['created_at']}, {waiting['state']}, never dispatched before it)",
        )


def operator_sigkill(ctx: Context) -> None:
    """SIGKILL the operator as soon as it dispatched something, ten times; every request
    must end in exactly one run, run once."""
    r = ctx.result
    kills = 4 if ctx.quick else 10
    r.injected = f"operator SIGKILLed mid-dispatch x {kills}, restarted each time"
    ctx.operator("boot")
    ctx.platform(maxConcurrency=8)
    model = ctx.model("m")
    names = [f"kept-{i}" for i in range(8)]
    create_agents(ctx, names, models.QUICK.prompt(), model)
    ids = ctx.agent_ids(names)
    ctx.stop_operators()
    op = ctx.operator("victim", start=False)
    requests: dict[str, list[str]] = {name: [] for name in names}
    mid_dispatch = 0

    def something_to_dispatch() -> bool:
        """Requests for the agents whose last one was answered (their runs end while the
        operator is down: runners write the journal themselves); true once a new request
        or a queued run without a Job is there, so the next start has a Job to create."""
        written = False
        for name in names:
            if _answered(ctx, ids[name], requests[name]):
                requests[name].append(ctx.request(name))
                written = True
        if written:
            return True
        # A kill between creating Jobs and recording them leaves runs queued that have
        # their Jobs already (the next operator finds them AlreadyExists): not new work.
        queued = ctx.journal.rows(
            "SELECT id, dispatched_at IS NOT NULL AS marked FROM agent_runs"
            " WHERE agent_id = ANY(%s) AND state = 'queued'",
            (list(ids.values()),),
        )
        jobs = set(ctx.kube.job_run_ids())
        if {int(row["id"]) for row in queued if not row["marked"]} - jobs:
            return True
        # A kill between a run's marking and its Job's create, or between the Job's
        # create and its run Secret's, strands the run until an operator repairs it (the
        # sweeper requeues a missing Job, gives a Job its missing Secret): no runner
        # answers its request meanwhile, so the next start has that work.
        marked = {int(row["id"]) for row in queued if row["marked"]}
        return bool(marked - jobs or marked - ctx.kube.run_secret_ids())

    for number in range(kills):
        wait_for(something_to_dispatch, 120, what="a run for the restarted operator to dispatch")
        jobs_before = len(ctx.kube.job_run_ids())
        op.start()

        def new_job(jobs_before: int = jobs_before) -> bool:
            return len(ctx.kube.job_run_ids()) > jobs_before

        try:
            wait_for(
                new_job,
                90,
                what="the restarted operator to create a Job",
                interval=0.05,
            )
            mid_dispatch += 1
        except ChaosTimeout:
            r.note(f"kill {number + 1}: no new Job within 90s; killed anyway")
        op.kill()
    op.start()
    written = [value for values in requests.values() for value in values]
    rows = ctx.wait_runs(
        lambda rows: (
            {row["request_key"] for row in rows} >= set(written)
            and all(row["state"] not in ("queued", "running") for row in rows)
        ),
        START_TIMEOUT,
        "every request to end in a run",
    )
    keys = [row["request_key"] for row in rows if row["request_key"] is not None]
    duplicates = len(keys) - len(set(keys))
    lost = sorted(set(written) - set(keys))
    not_ok = [
        (row["id"], row["state"], row["error"]) for row in rows if row["state"] != "succeeded"
    ]
    r.check(duplicates == 0, f"{duplicates} requests answered by two runs")
    r.check(not lost, f"requests without a run: {lost}")
    r.check(not not_ok, f"runs that did not succeed: {not_ok}")
    r.check(mid_dispatch >= kills // 2, f"only {mid_dispatch}/{kills} kills came mid-dispatch")
    r.figures.update(
        kills=kills, mid_dispatch=mid_dispatch, requests=len(written), runs=len(rows),
        duplicates=duplicates, lost=len(lost),
    )  # fmt: skip
    r.figure = (
        f"{kills} kills ({mid_dispatch} right after a Job was created); {len(written)} requests"
        f" -> {len(rows)} runs, {duplicates} duplicates, {len(lost)} lost"
    )
    ctx.check_journal()
    ctx.check_jobs(row["id"] for row in rows)
    ctx.check_status(names)
    ctx.check_operators_alive([op])


def _answered(ctx: Context, agent_id: int, values: list[str]) -> bool:
    """The agent's last request has its run, and that run is over."""
    if not values:
        return True
    row = ctx.journal.one(
        "SELECT state FROM agent_runs WHERE agent_id = %s AND request_key = %s",
        (agent_id, values[-1]),
    )
    return row is not None and row["state"] not in ("queued", "running")
