"""docs/runner.md's "Running one run by hand" works as written (with our model server's port)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from sqlalchemy import Engine

from achilles.modelserver.script import load_script
from tests.db.runner_support import achilles, serving

DOC = Path(__file__).parents[2] / "docs" / "runner.md"


def test_the_by_hand_walkthrough(db: Engine, database_url: str) -> None:
    text = DOC.read_text()
    snippet = re.search(r"python - <<'PY'\n(.*?)\nPY\n", text, re.DOTALL)
    assert snippet, "the walkthrough's Python snippet"
    assert "achilles ks load examples/knowledge/demo.yaml" in text
    loaded = achilles(
        database_url, "ks", "load", str(DOC.parents[1] / "examples/knowledge/demo.yaml")
    )
    assert loaded.returncode == 0, loaded.stderr

    with serving(load_script()) as server:
        code = snippet[1].replace("http://127.0.0.1:8400/v1", server.base_url)
        created = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "ACHILLES_DATABASE_URL": database_url},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert created.returncode == 0, created.stderr
        run_id = created.stdout.strip()
        ran = achilles(database_url, "runner", "--run-id", run_id)
        assert ran.returncode == 0, ran.stderr
    shown = achilles(database_url, "runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "succeeded" in shown.stdout
    assert "Onboarding checklist" in shown.stdout
