"""The demo path as an operator would walk it, all through the CLI: `ks load` a file,
`model-server --script` a script that is not in the repository, then the runner."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentModel
from tests.db.runner_support import ACHILLES, achilles, queue_run, run_row, run_to_end

KNOWLEDGE_YAML = """
users:
  - {key: dana, timezone: Europe/Lisbon}
  - {key: erik}
documents:
  - key: travel
    title: Travel policy
    body: Book trains for trips under 600 km. Flights need approval.
    readers: [dana, erik]
  - key: erik-review
    title: Erik's performance review
    body: Erik exceeded expectations. Promotion recommended.
    readers: [erik]
links:
  - {from: travel, to: erik-review, relation: mentions}
"""


@pytest.fixture
def knowledge_file(tmp_path: Path) -> Path:
    path = tmp_path / "knowledge.yaml"
    path.write_text(KNOWLEDGE_YAML)
    return path


def test_ks_load_search_and_read_as_a_user(
    db: Engine, database_url: str, knowledge_file: Path
) -> None:
    loaded = achilles(database_url, "ks", "load", str(knowledge_file))
    assert loaded.returncode == 0, loaded.stderr
    assert "2 document(s) created" in loaded.stdout
    assert "2 user(s) created" in loaded.stdout
    again = achilles(database_url, "ks", "load", str(knowledge_file))
    assert "0 document(s) created, 0 updated, 2 unchanged" in again.stdout

    dana = achilles(database_url, "ks", "search", "--as", "dana", "promotion travel")
    assert dana.returncode == 0, dana.stderr
    assert [hit["title"] for hit in json.loads(dana.stdout)] == ["Travel policy"]
    erik = json.loads(achilles(database_url, "ks", "search", "--as", "erik", "promotion").stdout)
    assert [hit["title"] for hit in erik] == ["Erik's performance review"]

    review_id = erik[0]["id"]
    hidden = achilles(database_url, "ks", "read", "--as", "dana", str(review_id))
    assert hidden.returncode == 1
    assert f"document {review_id} not found for 'dana'" in hidden.stderr
    shown = achilles(database_url, "ks", "read", "--as", "erik", str(review_id))
    assert json.loads(shown.stdout)["title"] == "Erik's performance review"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("documents: [{key: a, title: A}]", "bad.yaml: documents[0].body: required"),
        ("users: [{key: bad key}]", "bad.yaml: users[0].key: a user key starts with"),
        ("documents: [{key: a, title: A, body: b, readers: [zed]}]", "unknown user 'zed'"),
        ("documents: [unclosed", "not valid YAML/JSON"),
    ],
)
def test_ks_load_refuses_bad_files_with_exit_2(
    db: Engine, database_url: str, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = achilles(database_url, "ks", "load", str(path))
    assert result.returncode == 2
    assert message in result.stderr


ADVERSARY_SCRIPT = """
rules:
  - when: {turn: 0}
    reply:
      tool_calls:
        - name: search_knowledge
          arguments: {query: performance review promotion}
  - when: {turn: 1}
    reply:
      tool_calls:
        - name: read_document
          arguments: {document_id: %(review_id)d}
  - when: {turn: 2}
    reply:
      content: "search=${result.search_knowledge} read=${result.read_document}"
      usage: {prompt_tokens: 100, completion_tokens: 1}
"""


@pytest.fixture
def model_server_process(tmp_path: Path, db: Engine, database_url: str) -> Iterator[str]:
    """`achilles model-server` as its own process, with a script written by the test."""
    loaded = achilles(database_url, "ks", "load", str(_write(tmp_path, "k.yaml", KNOWLEDGE_YAML)))
    assert loaded.returncode == 0, loaded.stderr
    erik = json.loads(achilles(database_url, "ks", "search", "--as", "erik", "promotion").stdout)
    script = _write(tmp_path, "adversary.yaml", ADVERSARY_SCRIPT % {"review_id": erik[0]["id"]})
    checked = achilles(database_url, "model-server", "--script", str(script), "--check")
    assert checked.returncode == 0, checked.stderr
    process = subprocess.Popen(
        [ACHILLES, "model-server", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()  # blocks until the server listens
        match = re.search(r"listening on (http://\S+)", banner)
        assert match, banner
        yield match[1]
    finally:
        process.terminate()
        process.wait(timeout=30)


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_a_run_against_a_model_server_process_cannot_read_past_the_owners_rights(
    db: Engine, database_url: str, model_server_process: str
) -> None:
    with Session(db) as session, session.begin():
        session.execute(
            insert(AgentModel).values(
                name="outside", base_url=model_server_process, provider_model="any"
            )
        )
    run_id = queue_run(db, owner="dana", model="outside", prompt="Dig up Erik's review.")
    code, log = run_to_end(database_url, run_id)
    assert code == 0, log
    row = run_row(db, run_id)
    assert row.state == "succeeded", row.error
    assert row.output is not None
    assert "Promotion" not in row.output
    assert "not found" in row.output
    assert row.tokens_used > 101  # two estimated calls plus the scripted 101


def test_model_server_refuses_a_bad_script_with_exit_2(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.yaml", "rules: [{reply: {}}]")
    result = subprocess.run(
        [ACHILLES, "model-server", "--script", str(bad), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "bad.yaml: rules[0].reply: a reply needs content" in result.stderr
