"""The components' database logins on the tests' server, as an installer makes them
(`achilles db login`): each a member of its component's role only."""

from __future__ import annotations

import functools

from sqlalchemy.engine import make_url

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.services.db_roles import grant_login

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
    grant_login(admin(database_url), component, name, PASSWORD)
    url = make_url(database_url).set(username=name, password=PASSWORD)
    return url.render_as_string(hide_password=False)
