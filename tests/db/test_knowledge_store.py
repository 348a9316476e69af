"""The Knowledge Store reads under the owner's rights, enforced by PostgreSQL row-level security.

The tests connect as a superuser on purpose: superusers bypass RLS, so these
pass only because every KS read switches to the `achilles_ks_reader` role.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from achilles.db.knowledge.load import load_bundle
from achilles.db.knowledge.store import KS_READER_ROLE, PostgresKnowledgeStore, reading_as
from achilles.db.schema import metadata
from achilles.errors import InvalidInputError
from achilles.ks.bundle import KnowledgeBundle
from tests.db.ks_fixtures import BUNDLE, KnowledgeFixture, load_demo_knowledge

KS_TABLES = ("ks_documents", "ks_groups", "ks_group_members", "ks_document_access", "ks_links")


@pytest.fixture
def ks(db: Engine) -> KnowledgeFixture:
    return load_demo_knowledge(db)


@pytest.fixture
def store(db: Engine) -> PostgresKnowledgeStore:
    return PostgresKnowledgeStore(sessionmaker(db))


def test_a_user_finds_only_documents_granted_to_them_or_their_groups(
    ks: KnowledgeFixture, store: PostgresKnowledgeStore
) -> None:
    def titles(user: str, query: str) -> set[str]:
        return {hit.title for hit in store.search(ks.users[user], query, limit=10)}

    assert titles("alice", "onboarding deployment") == {
        "Alice's onboarding notes",
        "Engineering handbook",
    }
    assert titles("bob", "onboarding deployment") == {"Bob's salary review"}
    assert titles("carol", "onboarding deployment") == {"Engineering handbook"}
    assert titles("alice", "zanzibar bonus salary") == set()
    assert titles("bob", "zanzibar") == {"Bob's salary review"}


def test_search_ranks_documents_matching_more_words_first(
    ks: KnowledgeFixture, store: PostgresKnowledgeStore
) -> None:
    hits = store.search(ks.users["alice"], "how we deploy runbook", limit=10)
    assert hits[0].title == "Engineering handbook"
    assert hits[0].rank >= hits[-1].rank
    assert "**" in hits[0].snippet  # matched words are marked


def test_search_with_no_words_finds_nothing(
    ks: KnowledgeFixture, store: PostgresKnowledgeStore
) -> None:
    assert store.search(ks.users["alice"], " -- !! ", limit=5) == []
    # Query syntax words are just words: no syntax error reaches the model.
    assert store.search(ks.users["alice"], 'or OR "nor" -not <-> !', limit=5) == []


def test_reading_another_users_document_by_id_is_not_found(
    ks: KnowledgeFixture, store: PostgresKnowledgeStore
) -> None:
    secret = ks.documents["bob-secret"]
    assert store.read(ks.users["alice"], secret) is None
    assert store.read(ks.users["carol"], secret) is None
    document = store.read(ks.users["bob"], secret)
    assert document is not None
    assert document.title == "Bob's salary review"
    # A missing id looks exactly like a forbidden one.
    assert store.read(ks.users["bob"], 10_000_000) is None


def test_links_show_only_documents_visible_at_both_ends(
    ks: KnowledgeFixture, store: PostgresKnowledgeStore
) -> None:
    related = store.related(ks.users["alice"], ks.documents["alice-notes"], limit=10)
    assert related is not None
    assert {(r.title, r.relation, r.direction) for r in related} == {
        ("Engineering handbook", "references", "incoming")
    }
    # carol reaches the handbook through her group, but not alice's notes it links to.
    carol_related = store.related(ks.users["carol"], ks.documents["eng-handbook"], limit=10)
    assert carol_related == []
    assert store.related(ks.users["carol"], ks.documents["alice-notes"], limit=10) is None


def test_without_a_user_every_table_is_empty(ks: KnowledgeFixture, db: Engine) -> None:
    with Session(db) as session, session.begin():
        session.execute(text(f"SET LOCAL ROLE {KS_READER_ROLE}"))
        for table in KS_TABLES:
            assert session.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() == 0


def test_the_maintenance_switch_does_not_open_reads_for_the_reader(
    ks: KnowledgeFixture, db: Engine
) -> None:
    with reading_as(sessionmaker(db), ks.users["alice"]) as session:
        session.execute(text("SELECT set_config('achilles.ks_maintenance', 'on', true)"))
        keys = set(session.execute(text("SELECT key FROM ks_documents")).scalars())
    assert keys == {"alice-notes", "eng-handbook"}


def test_the_reader_cannot_write(ks: KnowledgeFixture, db: Engine) -> None:
    with reading_as(sessionmaker(db), ks.users["alice"]) as session:
        with pytest.raises(DBAPIError, match="read-only transaction"):
            session.execute(text("DELETE FROM ks_documents"))
        session.rollback()
    # Even outside a read-only transaction the role has SELECT only.
    with Session(db) as session, session.begin():
        session.execute(text(f"SET LOCAL ROLE {KS_READER_ROLE}"))
        session.execute(text("SELECT set_config('achilles.ks_maintenance', 'on', true)"))
        with pytest.raises(ProgrammingError, match="permission denied"):
            session.execute(text("INSERT INTO ks_groups (name) VALUES ('intruders')"))
        session.rollback()


def test_a_malformed_user_setting_is_an_error_not_a_leak(ks: KnowledgeFixture, db: Engine) -> None:
    with Session(db) as session, session.begin():
        session.execute(text(f"SET LOCAL ROLE {KS_READER_ROLE}"))
        session.execute(text("SELECT set_config('achilles.ks_user_id', '1 OR true', true)"))
        with pytest.raises(DBAPIError, match="invalid input syntax"):
            session.execute(text("SELECT count(*) FROM ks_documents"))
        session.rollback()


def test_every_ks_table_forces_row_level_security_and_the_role_cannot_bypass_it(
    db: Engine,
) -> None:
    with db.connect() as conn:
        flags = dict(
            conn.execute(
                text(
                    "SELECT relname, relrowsecurity AND relforcerowsecurity FROM pg_class "
                    "WHERE relname = ANY(:names) AND relkind = 'r'"
                ),
                {"names": list(KS_TABLES)},
            )
            .tuples()
            .all()
        )
        role = conn.execute(
            text("SELECT rolbypassrls, rolsuper, rolcanlogin FROM pg_roles WHERE rolname = :r"),
            {"r": KS_READER_ROLE},
        ).one()
    assert flags == dict.fromkeys(KS_TABLES, True)
    assert tuple(role) == (False, False, False)


def test_the_models_agree_with_the_migration(schema_diff: list[Any]) -> None:
    assert set(KS_TABLES) <= set(metadata.tables)
    ours = [d for d in schema_diff if any(table in repr(d) for table in KS_TABLES)]
    assert ours == []


def test_loading_twice_changes_nothing(ks: KnowledgeFixture, db: Engine) -> None:
    with Session(db) as session, session.begin():
        summary = load_bundle(session, KnowledgeBundle.model_validate(BUNDLE))
    assert (summary.documents_created, summary.documents_updated) == (0, 0)
    assert summary.documents_unchanged == 3
    assert summary.users_created == 0
    with db.connect() as conn:
        counts = [
            conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in KS_TABLES
        ]
    assert counts == [3, 1, 2, 3, 2]


def test_reloading_replaces_a_documents_grants(ks: KnowledgeFixture, db: Engine) -> None:
    changed = {
        "documents": [
            {
                "key": "bob-secret",
                "title": "Bob's salary review",
                "body": "Now shared.",
                "readers": ["alice"],
            },
        ]
    }
    with Session(db) as session, session.begin():
        summary = load_bundle(session, KnowledgeBundle.model_validate(changed))
    assert summary.documents_updated == 1
    store = PostgresKnowledgeStore(sessionmaker(db))
    assert store.read(ks.users["bob"], ks.documents["bob-secret"]) is None
    document = store.read(ks.users["alice"], ks.documents["bob-secret"])
    assert document is not None
    assert document.body == "Now shared."


@pytest.mark.parametrize(
    ("bundle", "message"),
    [
        (
            {"documents": [{"key": "d", "title": "t", "body": "b", "readers": ["zed"]}]},
            "documents[0].readers: unknown user 'zed'",
        ),
        (
            {"documents": [{"key": "d", "title": "t", "body": "b", "groups": ["nobody"]}]},
            "documents[0].groups: unknown group 'nobody'",
        ),
        (
            {"links": [{"from": "alice-notes", "to": "nowhere"}]},
            "links[0].to: unknown document 'nowhere'",
        ),
    ],
)
def test_dangling_references_are_refused_and_nothing_is_written(
    ks: KnowledgeFixture, db: Engine, bundle: dict[str, object], message: str
) -> None:
    parsed = KnowledgeBundle.model_validate(bundle)
    with Session(db) as session, session.begin():
        with pytest.raises(InvalidInputError, match=re.escape(message)):
            load_bundle(session, parsed)
        session.rollback()
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM ks_documents")).scalar_one() == 3
