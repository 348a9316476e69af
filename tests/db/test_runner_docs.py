"""docs/runner.md's "Running one run by hand" works as written: every command of its
console block is run in order (with our model server's port), and what the block shows
a command printing is what it prints."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from sqlalchemy import Engine

from achilles.modelserver.script import load_script
from tests.db.runner_support import achilles, serving

REPO = Path(__file__).parents[2]
DOC = REPO / "docs" / "runner.md"
DOCUMENTED_URL = "http://127.0.0.1:8400/v1"


def walkthrough() -> list[tuple[str, str]]:
    """(command, what the docs show it printing) for each `$ ` line of the section's block;
    a heredoc's body is part of its command."""
    section = DOC.read_text().split("## Running one run by hand", 1)[1]
    block = re.search(r"```console\n(.*?)```", section, re.DOTALL)
    assert block, "the walkthrough's console block"
    steps: list[tuple[str, str]] = []
    lines = iter(block[1].splitlines())
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            if command.endswith("<<'PY'"):
                command += "\n" + "\n".join(iter(lambda: next(lines), "PY"))
            steps.append((command, ""))
        elif steps:
            command, shown = steps[-1]
            steps[-1] = (command, shown + line + "\n")
    return steps


def _is_setting(word: str) -> bool:
    """`NAME=value` before a command: an environment variable for it."""
    name, equals, _ = word.partition("=")
    return bool(equals) and name.isidentifier() and name.isupper()


def test_the_by_hand_walkthrough(db: Engine, database_url: str) -> None:
    steps = walkthrough()
    commands = [command.split("\n")[0] for command, _ in steps]
    assert commands[:3] == [
        "achilles db upgrade",
        "achilles ks load examples/knowledge/demo.yaml",
        "achilles model-server --port 8400 &",
    ]
    with serving(load_script()) as server:  # the documented `model-server --port 8400 &`
        for command, shown in steps:
            if command.startswith("achilles model-server"):
                continue
            if command.startswith("python - <<'PY'"):
                code = command.split("\n", 1)[1].replace(DOCUMENTED_URL, server.base_url)
                done = subprocess.run(
                    [sys.executable, "-c", code],
                    env={**os.environ, "ACHILLES_DATABASE_URL": database_url},
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
            else:
                argv = shlex.split(command)
                settings = dict(a.split("=", 1) for a in itertools.takewhile(_is_setting, argv))
                argv = argv[len(settings) :]
                assert argv[0] == "achilles", command
                argv = [str(REPO / a) if a.startswith("examples/") else a for a in argv[1:]]
                done = achilles(database_url, *argv, env=settings)
            assert done.returncode == 0, f"{command}: {done.stderr}"
            if shown:
                assert done.stdout == shown, command
    shown_run = achilles(database_url, "runs", "show", "1")
    assert "succeeded" in shown_run.stdout
    assert "Onboarding checklist" in shown_run.stdout
