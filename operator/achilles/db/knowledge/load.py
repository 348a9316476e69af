"""Importing a `KnowledgeBundle` (documents, access lists, links) into the `ks_*` tables.

One transaction (the caller's): either the whole file is in, or nothing is.
Loading the same file twice changes nothing. Writes pass row-level security
through the `*_maintain` policies, which need `achilles.ks_maintenance = on`
for this transaction (and ordinary write privileges, which the schema owner has).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from achilles.db.journal.models import User
from achilles.db.journal.users import upsert_user
from achilles.errors import InvalidInputError
from achilles.ks.bundle import KnowledgeBundle


@dataclass(frozen=True)
class LoadSummary:
    users_created: int
    groups: int
    documents_created: int
    documents_updated: int
    documents_unchanged: int
    grants: int
    links: int


def load_bundle(session: Session, bundle: KnowledgeBundle) -> LoadSummary:
    session.execute(text("SELECT set_config('achilles.ks_maintenance', 'on', true)"))
    users_created = _create_missing_users(session, bundle)
    user_ids = _resolve_users(session, bundle)
    group_ids = _upsert_groups(session, bundle, user_ids)
    group_ids |= _resolve_existing_groups(session, bundle, group_ids)

    changes = {"created": 0, "updated": 0, "unchanged": 0}
    grants = 0
    document_ids: dict[str, int] = {}
    for index, doc in enumerate(bundle.documents):
        document_id, change = _upsert_document(session, doc.key, doc.title, doc.body)
        document_ids[doc.key] = document_id
        changes[change] += 1
        session.execute(
            text("DELETE FROM ks_document_access WHERE document_id = :id"), {"id": document_id}
        )
        for reader in sorted(set(doc.readers)):
            _grant(session, document_id, user_id=user_ids[reader])
            grants += 1
        for group in sorted(set(doc.groups)):
            if group not in group_ids:
                raise InvalidInputError(f"documents[{index}].groups: unknown group {group!r}")
            _grant(session, document_id, group_id=group_ids[group])
            grants += 1

    links = _replace_links(session, bundle, document_ids)
    return LoadSummary(
        users_created=users_created,
        groups=len(bundle.groups),
        documents_created=changes["created"],
        documents_updated=changes["updated"],
        documents_unchanged=changes["unchanged"],
        grants=grants,
        links=links,
    )


def _upsert_document(session: Session, key: str, title: str, body: str) -> tuple[int, str]:
    """Insert or update by key; an identical document is left alone (its updated_at too)."""
    row = session.execute(
        text(
            """
            INSERT INTO ks_documents (key, title, body) VALUES (:key, :title, :body)
            ON CONFLICT (key) DO UPDATE SET title = EXCLUDED.title, body = EXCLUDED.body
            WHERE (ks_documents.title, ks_documents.body)
                  IS DISTINCT FROM (EXCLUDED.title, EXCLUDED.body)
            RETURNING id, (xmax = 0) AS inserted
            """
        ),
        {"key": key, "title": title, "body": body},
    ).first()
    if row is not None:
        return row.id, "created" if row.inserted else "updated"
    existing = session.execute(
        text("SELECT id FROM ks_documents WHERE key = :key"), {"key": key}
    ).scalar_one()
    return existing, "unchanged"


def _create_missing_users(session: Session, bundle: KnowledgeBundle) -> int:
    existing = set(
        session.execute(
            select(User.key).where(User.key.in_([u.key for u in bundle.users]))
        ).scalars()
    )
    missing = [u for u in bundle.users if u.key not in existing]
    for user in missing:
        upsert_user(session, user.key, timezone=user.timezone, active=True)
    return len(missing)


def _resolve_users(session: Session, bundle: KnowledgeBundle) -> dict[str, int]:
    wanted = bundle.referenced_users()
    found = {
        key: user_id
        for user_id, key in session.execute(
            select(User.id, User.key).where(User.key.in_(sorted(wanted)))
        )
        .tuples()
        .all()
    }
    for index, group in enumerate(bundle.groups):
        for member in group.members:
            if member not in found:
                raise InvalidInputError(
                    f"groups[{index}].members: unknown user {member!r} (add it under users:)"
                )
    for index, doc in enumerate(bundle.documents):
        for reader in doc.readers:
            if reader not in found:
                raise InvalidInputError(
                    f"documents[{index}].readers: unknown user {reader!r} (add it under users:)"
                )
    return found


def _upsert_groups(
    session: Session, bundle: KnowledgeBundle, user_ids: dict[str, int]
) -> dict[str, int]:
    ids: dict[str, int] = {}
    for group in bundle.groups:
        group_id = session.execute(
            text(
                "INSERT INTO ks_groups (name) VALUES (:name)"
                " ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id"
            ),
            {"name": group.name},
        ).scalar_one()
        ids[group.name] = group_id
        session.execute(text("DELETE FROM ks_group_members WHERE group_id = :id"), {"id": group_id})
        for member in sorted(set(group.members)):
            session.execute(
                text("INSERT INTO ks_group_members (group_id, user_id) VALUES (:g, :u)"),
                {"g": group_id, "u": user_ids[member]},
            )
    return ids


def _resolve_existing_groups(
    session: Session, bundle: KnowledgeBundle, known: dict[str, int]
) -> dict[str, int]:
    wanted = sorted(bundle.referenced_groups() - set(known))
    rows = (
        session.execute(
            text("SELECT name, id FROM ks_groups WHERE name = ANY(:names)"), {"names": wanted}
        )
        .tuples()
        .all()
    )
    return dict(rows)


def _grant(
    session: Session, document_id: int, *, user_id: int | None = None, group_id: int | None = None
) -> None:
    session.execute(
        text(
            "INSERT INTO ks_document_access (document_id, user_id, group_id)"
            " VALUES (:d, :u, :g) ON CONFLICT DO NOTHING"
        ),
        {"d": document_id, "u": user_id, "g": group_id},
    )


def _replace_links(session: Session, bundle: KnowledgeBundle, document_ids: dict[str, int]) -> int:
    if document_ids:
        session.execute(
            text("DELETE FROM ks_links WHERE from_document_id = ANY(:ids)"),
            {"ids": list(document_ids.values())},
        )
    outside = sorted(
        {key for link in bundle.links for key in (link.from_key, link.to_key)} - set(document_ids)
    )
    ids = dict(document_ids)
    ids |= dict(
        session.execute(
            text("SELECT key, id FROM ks_documents WHERE key = ANY(:keys)"), {"keys": outside}
        )
        .tuples()
        .all()
    )
    for index, link in enumerate(bundle.links):
        for field, key in (("from", link.from_key), ("to", link.to_key)):
            if key not in ids:
                raise InvalidInputError(f"links[{index}].{field}: unknown document {key!r}")
        session.execute(
            text(
                "INSERT INTO ks_links (from_document_id, to_document_id, relation)"
                " VALUES (:f, :t, :r) ON CONFLICT DO NOTHING"
            ),
            {"f": ids[link.from_key], "t": ids[link.to_key], "r": link.relation},
        )
    return len(bundle.links)
