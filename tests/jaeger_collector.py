"""The `jaeger` session fixture: a real OpenTelemetry collector (Jaeger v2) the trace
tests export to, with its query API to read a trace back.

Built once per machine from the Go module proxy (`achilles_dev.jaeger_build`, cached
under ~/.cache/achilles/jaeger-<version>/); a cold build takes minutes, so it happens
during collection when a collected test needs the fixture, never inside a test's
timeout. Started per session on free ports, its OTLP receiver on 127.0.0.1; a test
that needs one elsewhere (on the address run pods reach the host at) asks for
`jaeger_binary` and starts its own (`achilles_dev.jaeger.start_jaeger`). Registered for
every tier in tests/conftest.py (`pytest_plugins`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from achilles_dev.jaeger import RunningJaeger, start_jaeger
from achilles_dev.jaeger_build import ensure_jaeger_built


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(
        {"jaeger", "jaeger_binary"} & set(getattr(item, "fixturenames", ()))
        for item in session.items
    ):
        ensure_jaeger_built(report=lambda line: print(line, flush=True))


@pytest.fixture(scope="session")
def jaeger_binary() -> Path:
    return ensure_jaeger_built()


@pytest.fixture(scope="session")
def jaeger(
    tmp_path_factory: pytest.TempPathFactory, jaeger_binary: Path
) -> Iterator[RunningJaeger]:
    running = start_jaeger(tmp_path_factory.mktemp("jaeger"))
    try:
        yield running
    finally:
        running.stop()
