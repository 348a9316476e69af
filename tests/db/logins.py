"""The components' database logins on the tests' server, as an installer makes them
(`achilles db login`): each a member of its component's role only."""

from __future__ import annotations

import functools

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.domain.run_secret import session_settings
from achilles.services.db_roles import grant_login_url

# The test server trusts 127.0.0.1, so these passwords are never checked here; the
# dev stack's pods log in with theirs (scram-sha-256).
PASSWORD = "a-login-of-the-tests"


@functools.cache
def admin(database_url: str) -> Database:
    """The tests' superuser (the migrations' login), one pool per database."""
    return Database(database_url, pool_size=1)


@functools.cache
def login_url(database_url: str, component: Component) -> str:
    """`database_url` with `component`'s login (`achilles_test_<component>`) in its place."""
    name = f"achilles_test_{component}"
    return grant_login_url(admin(database_url), component, name, PASSWORD)


def run_pod(database_url: str, run_id: int, secret: str) -> Database:
    """A run's pod as the database sees it: the runner's login with the run's id and secret."""
    return Database(
        login_url(database_url, Component.RUNNER),
        pool_size=1,
        session_settings=session_settings(run_id, secret),
    )
