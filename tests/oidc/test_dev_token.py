"""`achilles dev token USER` and the stack's provider (`achilles dev up/env/status`).

The stack here is a state directory with free ports and no node: only its
provider is started (as `achilles dev up` starts it, pid file and all), not the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from click.testing import CliRunner, Result

from achilles_dev import oidc
from achilles_dev.cli import dev
from achilles_dev.config import Ports, StackConfig
from achilles_dev.health import process_check
from achilles_dev.stack import LocalStack
from achilles_dev.stack_components import OIDC_PROVIDER


def _token(state_dir: Path, user: str) -> Result:
    return CliRunner().invoke(dev, ["token", "--state-dir", str(state_dir), user])


@pytest.fixture
def stack_with_provider(tmp_path: Path) -> Iterator[LocalStack]:
    config = StackConfig(state_dir=tmp_path / "stack", ports=Ports.free(), node="none")
    config.save()
    stack = LocalStack(config, report=lambda _: None)
    try:
        stack.start_oidc_provider()
        yield stack
    finally:  # also after a failed start: it leaves the process to `down`, as `up` does
        stack.stop_component(OIDC_PROVIDER)


def test_malformed_user_key_exits_2(tmp_path: Path) -> None:
    result = _token(tmp_path, "al ice")
    assert result.exit_code == 2, result.output
    assert "a user key starts with a letter or digit" in result.output
    assert "'al ice'" in result.output


def test_provider_not_running_exits_1(tmp_path: Path) -> None:
    result = _token(tmp_path, "alice")
    assert result.exit_code == 1, result.output
    assert "the stack's OIDC provider is not running" in result.output
    assert "achilles dev up" in result.output


def test_token_from_the_stacks_provider(stack_with_provider: LocalStack) -> None:
    config = stack_with_provider.config
    result = _token(config.state_dir, "alice@example.org")
    assert result.exit_code == 0, result.output
    token = result.output.strip()
    jwks = jwt.PyJWKClient(f"{config.oidc_issuer}/keys")
    claims = jwt.decode(
        token,
        jwks.get_signing_key_from_jwt(token).key,
        algorithms=["RS256"],
        audience=oidc.API_AUDIENCE,
        issuer=config.oidc_issuer,
    )
    assert claims[oidc.USER_CLAIM] == "alice@example.org"
    assert f"export ACHILLES_OIDC_ISSUER={config.oidc_issuer}" in stack_with_provider.env_lines()
    check = process_check(stack_with_provider, OIDC_PROVIDER)
    assert check.healthy
    assert config.oidc_issuer in check.detail
