"""The chart's monitoring objects and alerts, checked with the real helm and promtool.

Both are built from the Go module proxy once per machine and cached (helm with the
control plane, `achilles_dev.build`; promtool by `achilles_dev.promtool_build`). A
cold build takes minutes, so it happens during collection, when a collected test needs
it, and never counts against a test's timeout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from achilles_dev.build import ensure_built, missing_binaries
from achilles_dev.promtool_build import ensure_promtool_built
from achilles_dev.versions import bin_dir


def _needs(session: pytest.Session, fixture: str) -> bool:
    return any(fixture in getattr(item, "fixturenames", ()) for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if _needs(session, "helm") and missing_binaries(only={"helm"}):
        ensure_built(only={"helm"})
    if _needs(session, "promtool"):
        ensure_promtool_built(report=lambda line: print(line, flush=True))


@pytest.fixture(scope="session")
def helm() -> Path:
    return bin_dir() / "helm"


@pytest.fixture(scope="session")
def promtool() -> Path:
    return ensure_promtool_built()
