"""Cancel during dispatch (issue 22): runs cancelled while the dispatcher is making their
Jobs, through both doors at once (the Agent's `achilles.io/cancel-run` annotation and
`achilles runs cancel`). Every run ends `failed/cancelled` exactly once, whether it was
waiting, had its Job being made, or was running; no Job or pod of theirs is left; the
slots they held are free for the next run; a runner writes nothing after its run ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from achilles.k8s.annotations import CANCEL_RUN
from achilles.k8s.run_metadata import RUN_ID_LABEL
from achilles_chaos import models
from achilles_chaos.scenario import Context
from achilles_chaos.waiting import wait_for


def cancel_during_dispatch(ctx: Context) -> None:
    r = ctx.result
    count, cap = (8, 3) if ctx.quick else (40, 6)
    r.injected = (
        f"{count} held runs (maxConcurrency {cap}) cancelled the moment the dispatcher marks "
        "the first: half through achilles.io/cancel-run, half through `achilles runs cancel`"
    )
    op = ctx.operator()
    ctx.platform(maxConcurrency=cap)
    model = ctx.model("m")
    names = [f"c{n:02d}" for n in range(count)]
    for name in names:
        ctx.agent(name, models.HOLD.prompt(), model)
    agent_ids = ctx.agent_ids(names)
    after = ctx.last_run_id()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(ctx.request, names))
    by_agent = ctx.new_runs(agent_ids.values(), after, 120)
    runs = {name: by_agent[agent_ids[name]] for name in names}
    run_ids = sorted(runs.values())

    # The dispatcher has begun: the first run is marked (its Job being made).
    wait_for(
        lambda: ctx.journal.scalar(
            "SELECT count(*) FROM agent_runs WHERE id = ANY(%s) AND dispatched_at IS NOT NULL",
            (run_ids,),
        ),
        60,
        what="the dispatcher to take the first run",
        interval=0.02,
    )
    env = {**os.environ, "ACHILLES_DATABASE_URL": ctx.cluster.database_url}

    def cancel(name: str, through_cli: bool) -> tuple[int, str]:
        run_id = runs[name]
        if not through_cli:
            body = {"metadata": {"annotations": {CANCEL_RUN: str(run_id)}}}
            ctx.kube.patch("Agent", name, body, ctx.namespace)
            return 0, ""
        done = subprocess.run(
            [sys.executable, "-m", "achilles", "runs", "cancel", str(run_id), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done.returncode, done.stderr.strip()[-300:]

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=count) as pool:
        answers = list(pool.map(lambda n: cancel(n[1], n[0] % 2 == 1), enumerate(names)))
    for code, error in answers:
        r.check(code == 0, f"`achilles runs cancel` exited {code}: {error}")
    ended = ctx.wait_ended(run_ids, 90, "every cancelled run to end")
    ctx.runs()  # the watch remembers each ended row; it must never change again
    not_cancelled = {
        run: f"{row['state']}/{row['reason']}"
        for run, row in ended.items()
        if (row["state"], row["reason"]) != ("failed", "cancelled")
    }
    r.check(not not_cancelled, f"runs not ended cancelled: {not_cancelled}")
    dispatched = [run for run, row in ended.items() if row["dispatched_at"] is not None]
    claimed = [run for run, row in ended.items() if row["started_at"] is not None]

    # No Job, no pod of theirs left (the operator deletes them at once, or at its sweep).
    wanted = set(run_ids)
    wait_for(
        lambda: not wanted & set(ctx.kube.job_run_ids()) and not wanted & set(_live_pod_runs(ctx)),
        120,
        what="the cancelled runs' Jobs and pods to go",
        interval=1,
    )
    gone_after = time.monotonic() - started

    # Their slots are free: a run now starts and ends although every held run had one.
    ctx.agent("after", models.QUICK.prompt(), model)
    (after_agent,) = ctx.agent_ids(["after"]).values()
    newest = ctx.last_run_id()
    ctx.request("after")
    (after_run,) = ctx.new_runs([after_agent], newest, 60).values()
    final = ctx.wait_ended([after_run], 180, "a run after the cancels to end")[after_run]
    r.check(final["state"] == "succeeded", f"the run after the cancels: {final['state']}")

    # A cancel of a run that ended changes nothing, and says so.
    again = subprocess.run(
        [sys.executable, "-m", "achilles", "runs", "cancel", str(run_ids[0]), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    r.check(again.returncode == 0, f"a second cancel exited {again.returncode}")
    if again.returncode == 0:
        r.check(not json.loads(again.stdout)["cancelled"], "a second cancel cancelled again")

    ctx.check_journal()  # well-formed, no terminal row changed, nothing left active
    ctx.check_jobs(run_ids)
    r.check(op.alive(), "the operator exited")
    r.figures.update(
        runs=count, max_concurrency=cap, dispatched_when_cancelled=len(dispatched),
        claimed_when_cancelled=len(claimed), seconds_until_no_job_or_pod=round(gone_after, 1),
    )  # fmt: skip
    r.figure = (
        f"{count} runs cancelled ({len(dispatched)} dispatched, {len(claimed)} running); "
        f"no Job or pod left after {gone_after:.0f} s; the next run {final['state']}"
    )


def _live_pod_runs(ctx: Context) -> list[int]:
    return [
        int(value)
        for pod in ctx.kube.live_run_pods()
        if (value := (pod.metadata.labels or {}).get(RUN_ID_LABEL)) and str(value).isdigit()
    ]
