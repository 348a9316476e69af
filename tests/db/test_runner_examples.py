"""The examples docs/runner.md shows are the ones that work: demo knowledge, the built-in
demo model script, and the adversarial script, through the CLI and the runner."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import Engine

from achilles.modelserver.script import load_script
from tests.db.runner_support import (
    achilles,
    add_model,
    queue_run,
    run_row,
    run_scripted,
    run_to_end,
    serving,
)

EXAMPLES = Path(__file__).parents[2] / "examples"


def _load_examples(database_url: str) -> None:
    loaded = achilles(database_url, "ks", "load", str(EXAMPLES / "knowledge" / "demo.yaml"))
    assert loaded.returncode == 0, loaded.stderr
    # docs/runner.md: in a fresh database bob's review is document 4.
    found = json.loads(achilles(database_url, "ks", "search", "--as", "bob", "salary").stdout)
    assert [(d["id"], d["title"]) for d in found] == [(4, "Bob's compensation review")]


def test_the_demo_agent_answers_from_the_onboarding_checklist(
    db: Engine, database_url: str
) -> None:
    _load_examples(database_url)
    with serving(load_script()) as server:
        run_id = queue_run(
            db,
            owner="alice",
            model=add_model(db, server),
            prompt="What should I do on my first day?",
        )
        code, log = run_to_end(database_url, run_id)
    assert code == 0, log
    row = run_row(db, run_id)
    assert row.state == "succeeded"
    assert row.output is not None
    assert row.output.startswith('From "Onboarding checklist"')


def test_the_adversarial_example_gets_nothing_of_bobs(db: Engine, database_url: str) -> None:
    _load_examples(database_url)
    run = run_scripted(db, database_url, load_script(EXAMPLES / "model-scripts" / "adversary.yaml"))
    assert run.code == 0, run.log
    output = run.row.output
    assert output is not None
    assert 'read: {"error": "document 4 not found"}' in output
    assert "salary" not in output.lower()
    assert "compensation" not in output.lower()
    # alice sees the checklist's link to the runbook, not bob's review linking to it.
    assert "Deployment runbook" in output
