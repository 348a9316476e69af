"""Reference MCP servers as fixtures (`achilles_dev.mcp_servers`): real servers from the
registries, cached under ~/.cache/achilles/mcp, one process per test session each.

Import the fixtures a test module uses (`from tests.mcp_fixtures import mcp_everything`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from achilles_dev import mcp_servers
from achilles_dev.mcp_servers import McpServer


@pytest.fixture(scope="session")
def mcp_everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    server = mcp_servers.start_everything(tmp_path_factory.mktemp("mcp-everything"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mcp_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    server = mcp_servers.start_time(tmp_path_factory.mktemp("mcp-time"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mcp_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    server = mcp_servers.start_memory(tmp_path_factory.mktemp("mcp-memory"))
    yield server
    server.stop()
