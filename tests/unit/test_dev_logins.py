"""The dev stack's database logins and the pods' access rules, without a server: the
passwords are made once and kept readable by their owner only, URLs get a login put in
their place, and pods need a password (an earlier stack's `trust` lines are replaced)."""

from __future__ import annotations

import stat
from pathlib import Path

from achilles.db.roles import Component
from achilles_dev.logins import ComponentLogins, stored_passwords, with_login
from achilles_dev.postgres import ensure_pod_access

INITDB_LINES = [
    "local   all             all                                     trust",
    "host    all             all             127.0.0.1/32            trust",
]


def test_passwords_are_made_once_and_readable_by_their_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "state" / "database-passwords.json"
    first = stored_passwords(path)
    assert set(first) == {"postgres", "owner", "operator", "runner", "api"}
    assert len(set(first.values())) == 5
    assert all(len(password) >= 32 for password in first.values())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    assert stored_passwords(path) == first  # a second `up` keeps them
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_missing_password_is_added_and_the_others_kept(tmp_path: Path) -> None:
    path = tmp_path / "database-passwords.json"
    path.write_text('{"postgres": "kept-superuser-password", "operator": ""}')
    passwords = stored_passwords(path)
    assert passwords["postgres"] == "kept-superuser-password"
    assert passwords["operator"]
    assert stored_passwords(path) == passwords


def test_a_url_gets_a_login_and_the_host_pods_reach() -> None:
    admin = "postgresql+psycopg://postgres@127.0.0.1:15432/achilles"
    url = with_login(admin, user="achilles_dev_runner", password="p/w:@?")
    assert url == "postgresql+psycopg://achilles_dev_runner:p%2Fw%3A%40%3F@127.0.0.1:15432/achilles"
    logins = ComponentLogins(migrations=admin, operator=url, runner=url, api=url)
    on_node = logins.on_host("10.213.1.1")
    assert on_node.url(Component.RUNNER) == url.replace("127.0.0.1", "10.213.1.1")
    assert on_node.migrations == "postgresql+psycopg://postgres@10.213.1.1:15432/achilles"


def test_pods_need_a_password_and_an_earlier_trust_is_replaced(tmp_path: Path) -> None:
    hba = tmp_path / "pg_hba.conf"
    hba.write_text(
        "\n".join(
            [
                *INITDB_LINES,
                "# achilles dev: the real node's pods",
                "host all all 10.214.1.0/24 trust",
                "host all all 10.213.1.0/24 trust",
                "host all all 10.214.7.0/24 trust",  # a network the stack no longer has
            ]
        )
        + "\n"
    )
    ensure_pod_access(tmp_path, ("10.214.1.0/24", "10.213.1.0/24"))
    expected = [
        *INITDB_LINES,
        "# achilles dev: the real node's pods",
        "host all all 10.214.1.0/24 scram-sha-256",
        "host all all 10.213.1.0/24 scram-sha-256",
    ]
    assert hba.read_text().splitlines() == expected
    ensure_pod_access(tmp_path, ("10.214.1.0/24", "10.213.1.0/24"))
    assert hba.read_text().splitlines() == expected  # idempotent
    ensure_pod_access(tmp_path, ())
    assert hba.read_text().splitlines() == INITDB_LINES  # no node: loopback only
