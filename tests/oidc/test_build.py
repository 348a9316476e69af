"""The provider's build: one pinned version, stated in versions.toml and go.mod alike,
and a cache path that moves with the version and the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from achilles.errors import LocalStackError
from achilles_dev import oidc_build
from achilles_dev.versions import oidc_provider_version


def test_go_mod_requires_the_pinned_version() -> None:
    oidc_build._check_go_mod(oidc_provider_version())  # the checkout agrees with itself
    with pytest.raises(
        LocalStackError, match=r"does not require github.com/zitadel/oidc/v3 v3\.0\.0"
    ):
        oidc_build._check_go_mod("v3.0.0")


def test_cache_path_names_version_and_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ACHILLES_CACHE_DIR", str(tmp_path))
    path = oidc_build.binary_path()
    assert path.parent.parent.parent == tmp_path
    assert path.parent.parent.name.startswith(f"oidc-provider-{oidc_provider_version()}-")
    assert path.name == "oidc-provider"
