"""The journal's run figures behind the operator's metrics (services/run_metrics.py): the
active runs by phase and the oldest waiting one, the runs that ended and the claims made
in the window since the last pass (and none counted twice), on the real schema; and the
sweeper's pass that exports them (handlers/controllers/run_metrics.py).
Timestamps are the database's clock moved back, as the runner and the reaper write them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.db.journal.run_metrics import EndedRuns
from achilles.db.roles import Component
from achilles.handlers.controllers.run_metrics import RunMetricsPass
from achilles.services.run_metrics import SETTLE, read_run_figures
from tests.db.factories import make_agent, set_settings
from tests.db.logins import login_url


def _run(engine: Engine, state: str, ago: dict[str, int], **columns: object) -> None:
    """A run of a fresh agent, its timestamps `ago` seconds before the database's now."""
    agent_id = make_agent(engine)
    values: dict[str, object] = {"agent_id": agent_id, "state": state, "trigger": "manual"}
    values.update(columns)
    names = list(values) + list(ago)
    params = [f":{name}" for name in values] + [
        f"now() - make_interval(secs => :{name})" for name in ago
    ]
    with engine.begin() as conn:
        conn.execute(
            text(f"INSERT INTO agent_runs ({', '.join(names)}) VALUES ({', '.join(params)})"),
            {**values, **ago},
        )


@pytest.fixture
def operator_db(database_url: str) -> Iterator[Database]:
    """The operator's own login, as its run-metrics pass reads."""
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
    yield database
    database.dispose()


def _ended(figures_ended: list[EndedRuns]) -> dict[tuple[str, str, str], int]:
    return {(e.trigger, e.state, e.reason): e.count for e in figures_ended}


def test_active_runs_and_the_oldest_waiting(db: Engine, operator_db: Database) -> None:
    empty = read_run_figures(operator_db, None)
    assert (empty.active.waiting, empty.active.starting, empty.active.running) == (0, 0, 0)
    assert empty.oldest_waiting_seconds == 0.0
    set_settings(db, agent_max_concurrency=7)
    _run(db, "queued", {"created_at": 120})
    _run(db, "queued", {"created_at": 30})
    _run(db, "queued", {"created_at": 300, "dispatched_at": 5})  # its Job is made
    _run(db, "running", {"created_at": 400, "dispatched_at": 50, "started_at": 45,
                          "heartbeat_at": 3})  # fmt: skip
    figures = read_run_figures(operator_db, None)
    assert (figures.active.waiting, figures.active.starting, figures.active.running) == (2, 1, 1)
    # The oldest waiting run is the one without a Job: 120 s, not the dispatched 300 s.
    assert 120 <= figures.oldest_waiting_seconds < 130
    assert figures.max_concurrency == 7
    assert figures.ended == []
    assert figures.claim_delays == []


def test_a_window_counts_what_ended_and_what_was_claimed_once(
    db: Engine, operator_db: Database
) -> None:
    settle = int(SETTLE.total_seconds())
    first = read_run_figures(operator_db, None)
    # Move the first window's end back 45 s, as if the last pass had been then.
    since = first.until - timedelta(seconds=45 - settle)
    # Claimed inside the window, 3 s after dispatch, still running (its beat is recent).
    _run(db, "running", {"created_at": 60, "dispatched_at": 40, "started_at": 37,
                         "heartbeat_at": 2})  # fmt: skip
    # Claimed 2 s after dispatch and already ended inside the window.
    _run(db, "succeeded", {"created_at": 50, "dispatched_at": 44, "started_at": 42,
                           "heartbeat_at": 31, "finished_at": 30})  # fmt: skip
    # Started before the window, reaped inside it.
    _run(db, "failed", {"created_at": 300, "dispatched_at": 200, "started_at": 190,
                        "heartbeat_at": 120, "finished_at": 25}, reason="stale")  # fmt: skip
    # Skipped at its slot, inside the window (never dispatched: no claim).
    _run(db, "skipped", {"created_at": 20, "finished_at": 20, "scheduled_for": 21},
         reason="budget_exceeded", trigger="scheduled")  # fmt: skip
    # Ended too recently: a transaction that began then may not have committed yet.
    _run(db, "succeeded", {"created_at": 9, "dispatched_at": 8, "started_at": 7,
                           "heartbeat_at": 2, "finished_at": 2})  # fmt: skip
    # Ended before the window: an earlier pass counted it.
    _run(db, "failed", {"created_at": 600, "finished_at": 500}, reason="error")

    figures = read_run_figures(operator_db, since)
    assert _ended(figures.ended) == {
        ("manual", "succeeded", ""): 1,
        ("manual", "failed", "stale"): 1,
        ("scheduled", "skipped", "budget_exceeded"): 1,
    }
    assert sorted(round(delay, 3) for delay in figures.claim_delays) == [2.0, 3.0]

    # The next window starts where this one ended: nothing above is counted again, and
    # the run that ended too recently is counted once its window closes (here at once).
    later = read_run_figures(operator_db, figures.until, settle=timedelta(0))
    assert _ended(later.ended) == {("manual", "succeeded", ""): 1}
    assert [round(delay, 3) for delay in later.claim_delays] == [1.0]
    again = read_run_figures(operator_db, later.until, settle=timedelta(0))
    assert _ended(again.ended) == {}
    assert again.claim_delays == []


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_sweepers_pass_exports_the_figures_and_counts_each_run_once(
    db: Engine, operator_db: Database
) -> None:
    """The pass (handlers/controllers/run_metrics.py) on the operator's login: gauges set,
    each ended run counted and each claim observed once, the window moved on."""
    metrics_pass = RunMetricsPass(operator_db)
    first = metrics_pass()
    assert metrics_pass.since == first.until
    metrics_pass.since = first.until - timedelta(seconds=60)  # as if the last pass were then
    _run(db, "queued", {"created_at": 90})
    _run(db, "succeeded", {"created_at": 50, "dispatched_at": 45, "started_at": 40,
                           "heartbeat_at": 31, "finished_at": 30})  # fmt: skip
    ended = ("achilles_runs_ended_total", {"trigger": "manual", "state": "succeeded", "reason": ""})
    before = _sample(ended[0], **ended[1]), _sample("achilles_job_to_heartbeat_seconds_count")
    claims_sum = _sample("achilles_job_to_heartbeat_seconds_sum")

    metrics_pass()
    assert _sample(ended[0], **ended[1]) == before[0] + 1
    assert _sample("achilles_job_to_heartbeat_seconds_count") == before[1] + 1
    assert round(_sample("achilles_job_to_heartbeat_seconds_sum") - claims_sum, 3) == 5.0
    assert _sample("achilles_runs_active", phase="waiting") == 1
    assert _sample("achilles_runs_active", phase="running") == 0
    assert 90 <= _sample("achilles_oldest_waiting_run_seconds") < 100
    assert _sample("achilles_max_concurrency") >= 1

    metrics_pass()  # the next window: nothing counted twice
    assert _sample(ended[0], **ended[1]) == before[0] + 1
    assert _sample("achilles_job_to_heartbeat_seconds_count") == before[1] + 1
