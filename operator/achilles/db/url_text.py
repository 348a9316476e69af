"""A database URL as text: its accepted schemes, where it comes from, how it is logged.

Standard library only, because the runner reads its URL before it imports SQLAlchemy
(`achilles.db.run_claim`); `achilles.db.database` parses it fully.
"""

from __future__ import annotations

import os
import re

from achilles.errors import InvalidInputError

DATABASE_URL_ENV = "ACHILLES_DATABASE_URL"
# The spelling the docs use (`achilles dev env`, the chart's Secrets); `postgresql://` and
# `postgres://` mean the same.
URL_EXAMPLE = "postgresql+psycopg://user:password@host:5432/achilles"
SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgres+psycopg")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def redacted(url: str) -> str:
    """The URL with its password masked: what an error message may show."""
    return _PASSWORD.sub(r"\1***@", url)


def database_url_from_env() -> str:
    url = os.environ.get(DATABASE_URL_ENV)
    if not url:
        raise InvalidInputError(
            f"no database URL: pass --database-url or set {DATABASE_URL_ENV} (e.g. {URL_EXAMPLE})"
        )
    return url
