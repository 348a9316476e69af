"""What `achilles runner` imports before its claim, the run's first heartbeat.

A pod's start to its first heartbeat is mostly the interpreter importing the runner, so
the claim must not wait for the agent loop's stack (openai alone is most of a second of
CPU) nor for the journal's (SQLAlchemy, about half of what the claim waited for before it
was made with psycopg alone: docs/performance.md). A real runner process
against the real database and model server, with Python's own import log
(`PYTHONPROFILEIMPORTTIME`): every module named before the runner logs its claim was
imported before the claim.
"""

from __future__ import annotations

from sqlalchemy import Engine

from tests.db.ks_fixtures import load_demo_knowledge
from tests.db.runner_support import run_scripted

ANSWER = {
    "rules": [
        {
            "when": {"turn": 0},
            "reply": {"content": "done", "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
        }
    ]
}
# The agent loop's stack and the other processes' frameworks: none is the claim's business.
NOT_BEFORE_THE_CLAIM = (
    "openai",
    "httpx",
    "aiohttp",
    "achilles.llm",
    "achilles.tools",
    "achilles.runner.loop",
    "achilles.runner.execution",
    "pydantic",  # the tools' argument models and the schedule's: neither is the claim's
    "kopf",
    "kubernetes",
    "fastapi",
    "starlette",
    "achilles.handlers",
    "achilles.api",
    "achilles.k8s",
    "sqlalchemy",  # the journal's stack: the claim is one SQL function (db/run_claim.py)
    "achilles.db.database",
    "achilles.db.journal",
    "achilles.services",
)


def _imported(log_lines: list[str]) -> list[str]:
    """Module names from `import time: self | cumulative | name` lines, in order."""
    return [
        line.rsplit("|", 1)[1].strip()
        for line in log_lines
        if line.startswith("import time:") and not line.endswith("imported package")
    ]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_runner_claims_before_importing_the_agent_loops_stack(
    db: Engine, database_url: str
) -> None:
    load_demo_knowledge(db)  # the owner, alice
    run = run_scripted(db, database_url, ANSWER, extra_env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert run.code == 0, run.log
    assert (run.row.state, run.row.output) == ("succeeded", "done"), run.log

    lines = run.log.splitlines()
    claimed = [i for i, line in enumerate(lines) if f"run {run.run_id} claimed" in line]
    assert len(claimed) == 1, run.log
    before, after = _imported(lines[: claimed[0]]), _imported(lines[claimed[0] :])
    # The log is read right: the claim's own stack came before it.
    assert "achilles.runner.main" in before
    assert "psycopg" in before

    early = [m for m in before if any(_within(m, p) for p in NOT_BEFORE_THE_CLAIM)]
    assert early == [], f"imported before the claim: {early}"
    # ... and the agent loop's after it, on the same run.
    assert "openai" in after
    assert "sqlalchemy" in after
    assert "achilles.runner.execution" in after
