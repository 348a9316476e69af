"""A small Knowledge Store with three owners, a group and links across access boundaries."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.knowledge.load import load_bundle
from achilles.ks.bundle import KnowledgeBundle

BUNDLE = {
    "users": [{"key": "alice", "timezone": "Europe/Berlin"}, {"key": "bob"}, {"key": "carol"}],
    "groups": [{"name": "engineering", "members": ["alice", "carol"]}],
    "documents": [
        {
            "key": "alice-notes",
            "title": "Alice's onboarding notes",
            "body": "Onboarding checklist: laptop, badge, and the deployment runbook.",
            "readers": ["alice"],
        },
        {
            "key": "bob-secret",
            "title": "Bob's salary review",
            "body": "Zanzibar bonus plan for the onboarding team. Confidential.",
            "readers": ["bob"],
        },
        {
            "key": "eng-handbook",
            "title": "Engineering handbook",
            "body": "How we deploy: the deployment runbook lives in the wiki.",
            "groups": ["engineering"],
        },
    ],
    "links": [
        {"from": "alice-notes", "to": "bob-secret", "relation": "mentions"},
        {"from": "eng-handbook", "to": "alice-notes", "relation": "references"},
    ],
}


@dataclass(frozen=True)
class KnowledgeFixture:
    users: dict[str, int]
    documents: dict[str, int]


def load_demo_knowledge(engine: Engine, bundle: dict[str, object] = BUNDLE) -> KnowledgeFixture:
    with Session(engine) as session, session.begin():
        load_bundle(session, KnowledgeBundle.model_validate(bundle))
    with engine.connect() as conn:
        users = dict(conn.execute(text("SELECT key, id FROM users")).tuples().all())
        documents = dict(conn.execute(text("SELECT key, id FROM ks_documents")).tuples().all())
    return KnowledgeFixture(users=users, documents=documents)
