from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from achilles.db.database import Database
from achilles.db.schema import metadata
from achilles_dev.postgres import LocalPostgres
from tests.conftest import create_database, drop_database


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/db/" in str(item.fspath):
            item.add_marker(pytest.mark.db)


@pytest.fixture(scope="session")
def schema_diff(db_engine: Engine) -> list[Any]:
    """What Alembic would change to make the migrated database match the models (every
    model module's tables); empty when the models and the migrations agree."""
    with db_engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": False}
        )
        diff: list[Any] = compare_metadata(context, metadata)
    return diff


@pytest.fixture
def database(database_url: str, db: Engine) -> Iterator[Database]:
    """The application's database handle on the test database, emptied (`db`) first."""
    handle = Database(database_url)
    yield handle
    handle.dispose()


@pytest.fixture
def scratch_engine(postgres_server: LocalPostgres) -> Iterator[Engine]:
    """An empty database of its own, for migrating up and down."""
    name = create_database(postgres_server, prefix="achilles_scratch")
    engine = Database(postgres_server.url(name)).engine
    yield engine
    engine.dispose()
    drop_database(postgres_server, name)
