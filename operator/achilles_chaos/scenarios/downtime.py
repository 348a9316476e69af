"""A fault of the operator itself: it is down while slots pass, then comes back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from achilles_chaos import models
from achilles_chaos.journal import Row
from achilles_chaos.scenario import Context
from achilles_chaos.scenarios.operator import START_TIMEOUT, create_agents, slots_ready


def downtime_slots(ctx: Context) -> None:
    """The operator is down while several slots pass: one catch-up run per agent, then the
    schedule continues on its grid."""
    r = ctx.result
    r.injected = "operator down for 3.5 h of interval slots (4 missed) and 3 days of daily slots"
    ctx.operator("boot")
    model = ctx.model("m")
    hourly = [f"hourly-{i}" for i in range(4 if ctx.quick else 6)]
    daily = [f"daily-{i}" for i in range(2 if ctx.quick else 4)]
    create_agents(
        ctx, hourly, models.QUICK.prompt(), model, schedule={"type": "interval", "everyHours": 1}
    )
    create_agents(
        ctx,
        daily,
        models.QUICK.prompt(),
        model,
        schedule={"type": "calendar", "cadence": "daily", "time": "03:17"},
    )
    ids = ctx.agent_ids([*hourly, *daily])
    slots_ready(ctx, len(ids), 120)
    ctx.stop_operators()
    # While it is down, the clock passes the slots: 4 hourly slots, 3 daily ones.
    ctx.journal.execute(
        "UPDATE agents SET next_run_at = now() - interval '3 hours 30 minutes' WHERE id = ANY(%s)",
        ([ids[n] for n in hourly],),
    )
    ctx.journal.execute(
        "UPDATE agents SET next_run_at = next_run_at - interval '3 days' WHERE id = ANY(%s)",
        ([ids[n] for n in daily],),
    )
    missed = {
        int(row["id"]): row["next_run_at"]
        for row in ctx.journal.rows(
            "SELECT id, next_run_at FROM agents WHERE id = ANY(%s)", (list(ids.values()),)
        )
    }
    op = ctx.operator("back")
    rows = ctx.wait_runs(
        lambda rows: (
            len({row["agent_id"] for row in rows}) == len(ids)
            and all(row["state"] not in ("queued", "running") for row in rows)
        ),
        START_TIMEOUT,
        "one catch-up run per agent to end",
    )
    per_agent = _runs_per_agent(rows)
    expected = {
        **{ids[n]: missed[ids[n]] + timedelta(hours=4) for n in hourly},
        **{ids[n]: missed[ids[n]] + timedelta(days=3) for n in daily},
    }
    slots = _slots(ctx, ids.values())
    r.check(all(n == 1 for n in per_agent.values()), f"catch-up runs per agent: {per_agent}")
    wrong = {
        agent: (slots[agent], expected[agent])
        for agent in ids.values()
        if slots[agent] != expected[agent]
    }
    r.check(not wrong, f"next slots off the grid (got, expected): {wrong}")
    # The schedule continues: the next slot comes (the clock, again) and runs once.
    last = ctx.last_run_id()
    ctx.journal.execute(
        "UPDATE agents SET next_run_at = now() - interval '1 second' WHERE id = ANY(%s)",
        (list(ids.values()),),
    )
    again = ctx.wait_runs(
        lambda rows: (
            len({row["agent_id"] for row in rows if row["id"] > last}) == len(ids)
            and all(row["state"] not in ("queued", "running") for row in rows)
        ),
        START_TIMEOUT,
        "the next slot's run of each agent to end",
    )
    second = _runs_per_agent([row for row in again if row["id"] > last])
    r.check(all(n == 1 for n in second.values()), f"runs of the next slot per agent: {second}")
    not_ok = [
        (row["id"], row["state"], row["error"]) for row in again if row["state"] != "succeeded"
    ]
    r.check(not not_ok, f"runs that did not succeed: {not_ok}")
    r.figures.update(catch_up=per_agent, next_slot=second)
    r.figure = (
        f"{len(ids)} agents: catch-up runs per agent {sorted(set(per_agent.values()))}, next "
        f"slots on the grid {len(ids) - len(wrong)}/{len(ids)}, then 1 run each at the next slot"
    )
    ctx.check_journal()
    ctx.check_status([*hourly, *daily])
    ctx.check_operators_alive([op])


def _runs_per_agent(rows: list[Row]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for row in rows:
        counts[row["agent_id"]] = counts.get(row["agent_id"], 0) + 1
    return counts


def _slots(ctx: Context, agent_ids: Any) -> dict[int, Any]:
    return {
        int(row["id"]): row["next_run_at"]
        for row in ctx.journal.rows(
            "SELECT id, next_run_at FROM agents WHERE id = ANY(%s)", (list(agent_ids),)
        )
    }
