"""The runner's process life: claiming, heartbeats against the reaper, being reaped,
SIGTERM, deadlines, missing model or key. Real processes, real signals, real Postgres."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, delete, text, update
from sqlalchemy.orm import Session

from achilles.db.journal import runs as journal
from achilles.db.journal.models import AgentModel, AgentRun, User
from achilles.db.journal.settings import database_now
from tests.db.factories import set_settings
from tests.db.ks_fixtures import load_demo_knowledge
from tests.db.runner_support import (
    RunnerProcess,
    add_model,
    give_run_secret,
    queue_run,
    run_row,
    run_scripted,
    run_to_end,
    serving,
)
from tests.waiting import wait_for

# An answer held until the test releases it (`ModelServer.release`) or the server stops:
# what the test does while the model call is in flight comes first, however loaded the
# machine (a fixed delay was a race the reply could win).
HELD = "answer"
SLOW_ANSWER = {
    "rules": [
        {
            "when": {"turn": 0},
            "reply": {
                "content": "slow but sure",
                "hold": HELD,
                "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            },
        }
    ]
}


@pytest.fixture(autouse=True)
def _knowledge(db: Engine) -> None:
    load_demo_knowledge(db)


def _reap(engine: Engine, stale_after: timedelta, *, ahead: timedelta = timedelta(0)) -> list[int]:
    with Session(engine) as session, session.begin():
        now = database_now(session) + ahead
        # These runners are host processes with no Job: a reaped run ends at once.
        reaped = journal.reap_stale_runs(session, now=now, stale_after=stale_after, with_job=set())
        return [r.run_id for r in reaped]


def test_heartbeats_keep_a_long_model_call_alive_past_the_stale_threshold(
    db: Engine, database_url: str
) -> None:
    stale_after = timedelta(seconds=2)
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {
                    "content": "made it",
                    "hold": HELD,
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                },
            }
        ]
    }
    reaped: list[int] = []

    def reaper_pass_then_three_thresholds_past(called_at: datetime) -> bool:
        # The operator's reaper, run over and over while the model is thinking.
        reaped.extend(_reap(db, stale_after))
        with Session(db) as session:
            return database_now(session) - called_at > 3 * stale_after

    with serving(script) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server))
        runner = RunnerProcess(database_url, run_id, heartbeat=0.2)
        try:
            wait_for(lambda: server.recorded(), 30, what="the model call")
            with Session(db) as session:
                called_at = database_now(session)
            wait_for(
                lambda: reaper_pass_then_three_thresholds_past(called_at),
                60,
                what="three stale thresholds of reaper passes during the model call",
            )
            server.release(HELD)
            assert runner.wait() == 0, runner.log
        finally:
            runner.kill()
    assert reaped == []
    row = run_row(db, run_id)
    assert (row.state, row.output, row.tokens_used) == ("succeeded", "made it", 2)


def test_without_heartbeats_the_same_run_would_be_reaped_and_then_writes_nothing(
    db: Engine, database_url: str
) -> None:
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [{"name": "search_knowledge", "arguments": {"query": "deploy"}}],
                    "hold": HELD,
                    "usage": {"prompt_tokens": 5, "completion_tokens": 5},
                },
            },
            {"reply": {"content": "should never be written"}},
        ]
    }
    with serving(script) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server))
        runner = RunnerProcess(database_url, run_id, heartbeat=600)  # no beat during the test
        try:
            wait_for(lambda: server.recorded(), 30, what="the first model call")
            assert _reap(db, timedelta(0)) == [run_id]
            server.release(HELD)  # the answer comes to a run already reaped
            assert runner.wait() == 0, runner.log
        finally:
            runner.kill()
        requests = server.recorded()
    row = run_row(db, run_id)
    assert (row.state, row.reason, row.tokens_used, row.output) == ("failed", "stale", 0, None)
    assert row.error is not None
    assert row.error.startswith("no heartbeat for more than 0 s")
    # The refused token write stopped the loop: no tool call, no second model call.
    assert len(requests) == 1


def test_a_reaped_run_stops_at_its_next_heartbeat_without_waiting_for_the_model(
    db: Engine, database_url: str
) -> None:
    with serving(SLOW_ANSWER) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server))
        runner = RunnerProcess(database_url, run_id, heartbeat=0.2)
        try:
            wait_for(lambda: server.recorded(), 30, what="the model call")
            # As if the beats had stopped an hour ago.
            assert _reap(db, timedelta(seconds=90), ahead=timedelta(hours=1)) == [run_id]
            assert runner.wait(timeout=30) == 0, runner.log  # the answer is never released
        finally:
            runner.kill()
    assert "no longer running" in runner.log
    row = run_row(db, run_id)
    assert (row.state, row.reason, row.tokens_used, row.output) == ("failed", "stale", 0, None)


def test_sigterm_mid_run_leaves_a_failed_row_that_kept_its_tokens(
    db: Engine, database_url: str
) -> None:
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [{"name": "search_knowledge", "arguments": {"query": "deploy"}}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": 4},
                },
            },
            {"when": {"turn": 1}, "reply": {"content": "never", "hold": HELD}},
        ]
    }
    with serving(script) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server))
        runner = RunnerProcess(database_url, run_id, heartbeat=0.2)
        try:
            # Tokens are in the row while the run is still going.
            wait_for(
                lambda: run_row(db, run_id).tokens_used == 24 and len(server.recorded()) == 2,
                30,
                what="the first call's tokens and the second call",
            )
            assert run_row(db, run_id).state == "running"
            runner.terminate()
            assert runner.wait(timeout=30) == 0, runner.log
        finally:
            runner.kill()
    row = run_row(db, run_id)
    assert (row.state, row.reason, row.tokens_used) == ("failed", "error", 24)
    assert row.error == "runner terminated by SIGTERM before the run finished"


def test_a_run_that_is_not_queued_is_left_alone(db: Engine, database_url: str) -> None:
    with serving(SLOW_ANSWER) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server))
        with Session(db) as session, session.begin():
            assert journal.claim_run(session, run_id)
            assert journal.succeed_run(session, run_id, "done elsewhere")
        code, log = run_to_end(database_url, run_id)
        missing_code, missing_log = run_to_end(database_url, 999_999)
        assert server.recorded() == []
    assert code == 0, log
    assert "not queued" in log
    assert missing_code == 0, missing_log
    row = run_row(db, run_id)
    assert (row.state, row.output) == ("succeeded", "done elsewhere")


def test_two_runners_for_one_run_claim_it_once(db: Engine, database_url: str) -> None:
    script = {"rules": [{"reply": {"content": "once", "delay_seconds": 1}}]}
    with serving(script) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server))
        # Two pods of one Job: the same environment, so the same secret.
        secret = give_run_secret(database_url, run_id)
        runners = [RunnerProcess(database_url, run_id, run_secret=secret) for _ in range(2)]
        try:
            codes = [runner.wait() for runner in runners]
        finally:
            for runner in runners:
                runner.kill()
        assert len(server.recorded()) == 1
    assert codes == [0, 0]
    assert sum("not queued" in runner.log for runner in runners) == 1
    assert run_row(db, run_id).output == "once"


def test_a_model_withdrawn_after_queueing_stops_the_run_with_no_trace(
    db: Engine, database_url: str
) -> None:
    """The claim is the last start gate (issue 36 item 2): a model withdrawn after the
    run was queued is a closed lock, so the run is removed (seed 000: no row), not
    failed, and the operator is left the refusal to tell the Agent."""
    with serving(SLOW_ANSWER) as server:
        model = add_model(db, server)
        run_id = queue_run(db, owner="alice", model=model)
        with Session(db) as session, session.begin():
            session.execute(delete(AgentModel).where(AgentModel.name == model))
        code, log = run_to_end(database_url, run_id)
        assert server.recorded() == []
    assert code == 0, log
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM agent_runs")).scalar_one() == 0
        refused = conn.execute(text("SELECT run_id, has_model FROM run_start_refusals")).all()
    assert [tuple(row) for row in refused] == [(run_id, False)]


def test_the_api_key_comes_from_the_environment(db: Engine, database_url: str) -> None:
    script = {"rules": [{"reply": {"content": "authenticated"}}]}
    with serving(script, api_key="s3cret") as server:
        model = add_model(db, server, secret=True)
        good = queue_run(db, owner="alice", model=model)
        assert run_to_end(database_url, good, api_key="s3cret")[0] == 0
        wrong = queue_run(db, owner="bob", model=model)
        assert run_to_end(database_url, wrong, api_key="guess")[0] == 0
        missing = queue_run(db, owner="carol", model=model)
        assert run_to_end(database_url, missing)[0] == 0

    assert run_row(db, good).output == "authenticated"
    wrong_row = run_row(db, wrong)
    assert (wrong_row.state, wrong_row.reason) == ("failed", "error")
    assert wrong_row.error is not None
    assert "HTTP 401" in wrong_row.error
    missing_row = run_row(db, missing)
    assert (missing_row.state, missing_row.reason) == ("failed", "error")
    assert missing_row.error is not None
    assert "ACHILLES_MODEL_API_KEY is not set" in missing_row.error


def test_the_run_timeout_fails_a_run_stuck_in_a_model_call(db: Engine, database_url: str) -> None:
    set_settings(db, agent_run_timeout_seconds=2)
    run = run_scripted(db, database_url, SLOW_ANSWER, model_timeout=120)
    assert run.code == 0, run.log
    row = run.row
    assert (row.state, row.reason) == ("failed", "error")
    assert row.error == "run timed out: it exceeded its limit of 2 s"


def test_an_unreachable_database_is_a_crash_exit(database_url: str) -> None:
    code, log = run_to_end("postgresql://nobody@127.0.0.1:1/none", 1, as_runner=False)
    assert code == 1
    assert "database unreachable" in log


def test_an_owner_timezone_the_runner_cannot_resolve_fails_the_run_clearly(
    db: Engine, database_url: str
) -> None:
    with serving(SLOW_ANSWER) as server:
        run_id = queue_run(db, owner="carol", model=add_model(db, server))
        with Session(db) as session, session.begin():
            session.execute(update(User).where(User.key == "carol").values(timezone="Mars/Base"))
        code, log = run_to_end(database_url, run_id)
        assert server.recorded() == []
    assert code == 0, log
    row = run_row(db, run_id)
    assert (row.state, row.reason) == ("failed", "error")
    assert row.error == "the owner's timezone 'Mars/Base' is not a known IANA time zone"


def test_a_sigterm_at_the_jobs_deadline_names_the_deadline(db: Engine, database_url: str) -> None:
    """Kubernetes enforces runTimeoutSeconds with the Job's activeDeadlineSeconds, which
    counts from the Job's start: its SIGTERM comes before the runner's own deadline (the
    pod's start-up used part of the limit), and the run's error must name the limit, not
    only the signal (found by `achilles chaos run-deadline`)."""
    set_settings(db, agent_run_timeout_seconds=30)
    with serving(SLOW_ANSWER) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server))
        with Session(db) as session, session.begin():  # its Job was created 31 s ago
            session.execute(
                update(AgentRun)
                .where(AgentRun.id == run_id)
                .values(dispatched_at=database_now(session) - timedelta(seconds=31))
            )
        runner = RunnerProcess(database_url, run_id, heartbeat=0.2)
        try:
            # At the claim, not at the model call: the runner's own deadline is 9 s after
            # its claim here, and the agent loop's imports come after the claim, so on a
            # loaded machine the model call could come after that deadline. A SIGTERM
            # at any moment after the claim is the one the Job's deadline would send.
            wait_for(lambda: run_row(db, run_id).state == "running", 30, what="the claim")
            runner.terminate()  # as the kubelet does at the Job's deadline
            assert runner.wait(timeout=30) == 0, runner.log
        finally:
            runner.kill()
    row = run_row(db, run_id)
    assert (row.state, row.reason) == ("failed", "error")
    assert row.error == (
        "run timed out: it exceeded its limit of 30 s (Kubernetes stopped its pod at the"
        " Job's activeDeadlineSeconds)"
    )


def test_a_runner_with_a_superuser_login_ends_its_run_saying_why(
    db: Engine, database_url: str
) -> None:
    """A runs Secret holding the superuser's URL would let every tool read every owner's
    data: the runner refuses to run the agent (the run fails, saying what to do), unless
    the installation said it is a first try (ACHILLES_ALLOW_SUPERUSER, which the operator
    passes on to its Jobs)."""
    script = {"rules": [{"reply": {"content": "ran"}}]}
    with serving(script) as server:
        model = add_model(db, server)
        refused = queue_run(db, owner="alice", model=model)
        assert run_to_end(database_url, refused, as_runner=False)[0] == 0
        allowed = queue_run(db, owner="bob", model=model)
        allow = {"ACHILLES_ALLOW_SUPERUSER": "true"}
        assert run_to_end(database_url, allowed, as_runner=False, extra_env=allow)[0] == 0
        assert len(server.recorded()) == 1, "the refused run never called the model"
    row = run_row(db, refused)
    assert (row.state, row.reason) == ("failed", "error")
    assert row.error is not None
    assert "is a superuser" in row.error
    assert "achilles db login runner" in row.error
    assert run_row(db, allowed).output == "ran"
