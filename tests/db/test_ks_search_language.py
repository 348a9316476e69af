"""Knowledge Store search matches word forms in the installation's language (English by
default), and docs/runner.md's commands work as written: `achilles ks search --as alice
"deploy"` used to return [] because the index matched exact words only ("simple")."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from sqlalchemy import Engine, text

from tests.db.runner_support import achilles

REPO = Path(__file__).parents[2]
DOC = REPO / "docs" / "runner.md"


def documented(prefix: str) -> list[list[str]]:
    """The `achilles ...` commands docs/runner.md shows that start with `prefix`."""
    commands = re.findall(r"`(achilles [^`]+)`", DOC.read_text())
    return [shlex.split(c)[1:] for c in commands if c.startswith(f"achilles {prefix}")]


def titles(result_stdout: str) -> list[str]:
    return [hit["title"] for hit in json.loads(result_stdout)]


def test_the_documented_knowledge_commands_work_as_written(db: Engine, database_url: str) -> None:
    (load,) = documented("ks load")
    loaded = achilles(database_url, *load[:-1], str(REPO / load[-1]))
    assert loaded.returncode == 0, loaded.stderr

    (search,) = documented("ks search")
    assert search == ["ks", "search", "--as", "alice", "deploy"]
    found = achilles(database_url, *search)
    assert found.returncode == 0, found.stderr
    # "deploy" finds "Deploys", "deployment": the runbook, and the checklist that links it.
    assert titles(found.stdout) == ["Deployment runbook", "Onboarding checklist"]
    assert "**Deploys**" in json.loads(found.stdout)[0]["snippet"]

    (read,) = documented("ks read")
    document = achilles(database_url, *read)
    assert document.returncode == 0, document.stderr
    assert json.loads(document.stdout)["title"] == "Deployment runbook"


def test_the_search_language_is_the_installations_choice(db: Engine, database_url: str) -> None:
    achilles(database_url, "ks", "load", str(REPO / "examples/knowledge/demo.yaml"))
    shown = achilles(database_url, "ks", "language")
    assert shown.stdout.splitlines()[0] == "search language: english"
    assert "german" in shown.stdout.splitlines()[1]
    with db.connect() as conn:
        edited_before = conn.execute(text("SELECT id, updated_at FROM ks_documents")).all()

    exact = achilles(database_url, "ks", "language", "simple")
    assert exact.stdout.strip() == "search language: simple (4 document(s) re-indexed)"
    assert titles(achilles(database_url, "ks", "search", "--as", "alice", "deploy").stdout) == []
    deployment = achilles(database_url, "ks", "search", "--as", "alice", "deployment").stdout
    assert "Deployment runbook" in titles(deployment)

    german = achilles(database_url, "ks", "language", "german")
    assert german.returncode == 0, german.stderr
    achilles(database_url, "ks", "language", "english")
    assert titles(achilles(database_url, "ks", "search", "--as", "alice", "deploy").stdout)
    with db.connect() as conn:  # re-indexing is not an edit of the documents
        assert conn.execute(text("SELECT id, updated_at FROM ks_documents")).all() == edited_before

    unknown = achilles(database_url, "ks", "language", "klingon")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: LANGUAGE: unknown search language 'klingon'")


def test_a_document_loaded_later_is_indexed_in_the_language_in_force(
    db: Engine, database_url: str
) -> None:
    achilles(database_url, "ks", "language", "simple")
    achilles(database_url, "ks", "load", str(REPO / "examples/knowledge/demo.yaml"))
    with db.connect() as conn:
        vectors = conn.execute(
            text("SELECT search::text FROM ks_documents WHERE key = 'deployment-runbook'")
        ).scalar_one()
    assert "'deploys'" in vectors  # simple: the word as written, no stem
