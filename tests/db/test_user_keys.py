"""One rule for a user key: what an Agent can name as its owner is exactly what the CLI,
the Knowledge Store bundle and the database accept (issue 14: `users upsert "bad key
with spaces"` used to succeed, creating a user no Agent could ever name)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from achilles.domain.users import is_valid_user_key
from achilles.k8s.resources.agent import AgentSpec
from achilles.ks.bundle import UserEntry
from tests.db.runner_support import achilles

KEYS = {
    "alice": True,
    "alice@example.org": True,
    "a.b+c_d-e": True,
    "7": True,
    "A" * 253: True,
    "A" * 254: False,
    "bad key with spaces": False,
    "": False,
    ".alice": False,
    "-alice": False,
    "alice\n": False,
    "alice/bob": False,
    "élodie": False,
}


def crd_accepts(key: str) -> bool:
    try:
        AgentSpec.model_validate({"owner": key, "prompt": "p"})
    except ValidationError:
        return False
    return True


def bundle_accepts(key: str) -> bool:
    try:
        UserEntry.model_validate({"key": key})
    except ValidationError:
        return False
    return True


def database_accepts(engine: Engine, key: str) -> bool:
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO users (key) VALUES (:key)"), {"key": key})
    except IntegrityError:
        return False
    return True


@pytest.mark.parametrize(("key", "valid"), KEYS.items(), ids=[repr(k[:20]) for k in KEYS])
def test_every_writer_agrees_on_what_a_user_key_is(db: Engine, key: str, valid: bool) -> None:
    assert is_valid_user_key(key) is valid
    assert crd_accepts(key) is valid
    assert bundle_accepts(key) is valid
    assert database_accepts(db, key) is valid


def test_users_upsert_refuses_a_key_no_agent_could_name(db: Engine, database_url: str) -> None:
    result = achilles(database_url, "users", "upsert", "bad key with spaces")
    assert result.returncode == 2
    assert result.stderr.startswith("error: USER: a user key starts with a letter or digit")
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM users")).scalar_one() == 0


def test_users_upsert_says_unchanged_when_nothing_changed(db: Engine, database_url: str) -> None:
    first = achilles(database_url, "users", "upsert", "dana", "--timezone", "Europe/Berlin")
    assert first.stdout.strip() == "user dana created (active)"
    again = achilles(database_url, "users", "upsert", "dana", "--timezone", "Europe/Berlin")
    assert again.stdout.strip() == "user dana unchanged (active)"
    kept = achilles(database_url, "users", "upsert", "dana")  # no --timezone: zone kept
    assert kept.stdout.strip() == "user dana unchanged (active)"
    moved = achilles(database_url, "users", "upsert", "dana", "--inactive")
    assert moved.stdout.strip() == "user dana updated (inactive)"


def test_a_postgres_url_from_a_hosted_offer_works(db: Engine, database_url: str) -> None:
    hosted = database_url.replace("postgresql+psycopg://", "postgres://", 1)
    assert hosted.startswith("postgres://")
    result = achilles(hosted, "runs", "list", "--json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_one_way_to_name_a_revision(database_url: str) -> None:
    upgraded = achilles(database_url, "db", "upgrade", "heads")
    assert upgraded.returncode == 0, upgraded.stderr
    assert "nothing to do" in upgraded.stdout
    unknown = achilles(database_url, "db", "upgrade", "bogus")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: REVISION: unknown revision 'bogus'")
    option = achilles(database_url, "db", "upgrade", "--revision", "heads")
    assert option.returncode == 2
    assert option.stderr == "error: --revision: no such option\n"
