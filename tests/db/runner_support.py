"""Running `achilles runner` as a Job's pod would: a real process, a real database, a real
model server on loopback, and the `openai` client in between."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.orm import Session

from achilles.db.journal import runs as journal
from achilles.db.journal.agents import create_agent
from achilles.db.journal.models import AgentModel, AgentRun, AgentToolLink, Tool
from achilles.db.roles import Component
from achilles.domain.run_secret import RUN_SECRET_ENV, RunSecret
from achilles.domain.runs import RunState, RunTrigger
from achilles.modelserver.script import Script, parse_script
from achilles.modelserver.server import ModelServer, RecordedRequest
from tests.db.logins import admin, login_url

ACHILLES = str(Path(sys.executable).with_name("achilles"))


def achilles(
    database_url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The `achilles` console script as a person runs it (`env`: more variables)."""
    env = {**os.environ, "ACHILLES_DATABASE_URL": database_url, **(env or {})}
    return subprocess.run(
        [ACHILLES, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@contextmanager
def serving(
    script: dict[str, Any] | Script, *, api_key: str | None = None
) -> Iterator[ModelServer]:
    parsed = script if isinstance(script, Script) else parse_script(script, source="test script")
    with ModelServer(parsed, api_key=api_key) as server:
        yield server


def add_model(
    engine: Engine, server: ModelServer, *, name: str = "scripted", secret: bool = False
) -> str:
    with Session(engine) as session, session.begin():
        session.execute(
            insert(AgentModel).values(
                name=name,
                base_url=server.base_url,
                provider_model="scripted-model",
                api_key_secret_name="model-key" if secret else None,
                api_key_secret_key="api-key" if secret else None,
            )
        )
    return name


def add_tool(engine: Engine, name: str, implementation: str, *, allowed: bool = True) -> int:
    with Session(engine) as session, session.begin():
        return session.execute(
            insert(Tool)
            .values(name=name, implementation=implementation, agents_allowed=allowed)
            .returning(Tool.id)
        ).scalar_one()


def queue_run(
    engine: Engine,
    *,
    owner: str,
    model: str | None,
    prompt: str = "What is in the onboarding checklist?",
    tool_ids: Sequence[int] = (),
) -> int:
    with Session(engine) as session, session.begin():
        agent_id = create_agent(
            session, owner_key=owner, name=f"{owner}'s agent", prompt=prompt, model_name=model
        )
        for tool_id in tool_ids:
            session.execute(insert(AgentToolLink).values(agent_id=agent_id, tool_id=tool_id))
        result = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
    assert result.is_queued
    return result.run_id


@dataclass(frozen=True)
class RunRow:
    state: str
    reason: str | None
    tokens_used: int
    output: str | None
    error: str | None
    finished_at: datetime | None


def run_row(engine: Engine, run_id: int) -> RunRow:
    with Session(engine) as session:
        row = session.execute(select(AgentRun).where(AgentRun.id == run_id)).scalar_one()
        return RunRow(
            row.state, row.reason, row.tokens_used, row.output, row.error, row.finished_at
        )


def runner_login_url(database_url: str) -> str:
    """Every runner of these tests connects as a member of `achilles_runner`, as in a
    cluster, so each runner test also proves the run pod's privileges suffice."""
    return login_url(database_url, Component.RUNNER)


def give_run_secret(database_url: str, run_id: int) -> str:
    """What dispatch does for a run's Job: a fresh secret, its hash in the row (a row no
    longer queued keeps what it had: the runner finds nothing to claim)."""
    secret = RunSecret.new()
    with admin(database_url).transaction() as session:
        session.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id, AgentRun.state == RunState.QUEUED)
            .values(runner_secret_hash=secret.digest)
        )
    return secret.value


class RunnerProcess:
    """`achilles runner --run-id N` in its own process, with the pod's environment: the
    runner's login and the run's secret (`run_secret`: the one its Job was given, else a
    new one; `as_runner=False`: `database_url` as it is, no secret)."""

    def __init__(
        self,
        database_url: str,
        run_id: int,
        *,
        api_key: str | None = None,
        heartbeat: float = 30.0,
        model_timeout: float = 30.0,
        max_retries: int = 2,
        extra_args: Sequence[str] = (),
        as_runner: bool = True,
        run_secret: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        # Only what the test gives: no ACHILLES_* setting, no trace export, of its own.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ACHILLES_", "OTEL_")) and k not in ("TRACEPARENT", "TRACESTATE")
        }
        env["ACHILLES_DATABASE_URL"] = database_url
        if as_runner:
            env["ACHILLES_DATABASE_URL"] = runner_login_url(database_url)
            env[RUN_SECRET_ENV] = run_secret or give_run_secret(database_url, run_id)
        env.update(extra_env or {})
        if api_key is not None:
            env["ACHILLES_MODEL_API_KEY"] = api_key
        self.process = subprocess.Popen(
            [
                ACHILLES,
                "runner",
                "--run-id",
                str(run_id),
                "--heartbeat-interval",
                str(heartbeat),
                "--model-timeout",
                str(model_timeout),
                "--model-max-retries",
                str(max_retries),
                *extra_args,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._output: tuple[str, str] | None = None

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 120) -> int:
        """Exit code; the process's output is kept for `log`."""
        stdout, stderr = self.process.communicate(timeout=timeout)
        self._output = (stdout, stderr)
        return self.process.returncode

    @property
    def log(self) -> str:
        assert self._output is not None, "wait() first"
        return self._output[0] + self._output[1]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def run_to_end(database_url: str, run_id: int, **options: Any) -> tuple[int, str]:
    runner = RunnerProcess(database_url, run_id, **options)
    try:
        return runner.wait(), runner.log
    finally:
        runner.kill()


@dataclass(frozen=True)
class ScriptedRun:
    """A fresh agent's run against a scripted model, carried to its end."""

    run_id: int
    code: int
    log: str
    row: RunRow
    requests: list[RecordedRequest]  # what the model server answered, in order


def run_scripted(
    engine: Engine,
    database_url: str,
    script: dict[str, Any] | Script,
    *,
    owner: str = "alice",
    **runner_options: Any,
) -> ScriptedRun:
    """Serve `script`, queue a run of a new agent of `owner` on it, and run that to the end."""
    with serving(script) as server:
        run_id = queue_run(engine, owner=owner, model=add_model(engine, server))
        code, log = run_to_end(database_url, run_id, **runner_options)
        requests = server.recorded()
    return ScriptedRun(run_id, code, log, run_row(engine, run_id), requests)
