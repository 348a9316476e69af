"""`achilles api`: settings from the environment, one error line on bad ones, and a real
server process answering a real token."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from achilles.cli.main import cli
from achilles.db.roles import Component
from tests.api.conftest import Tokens
from tests.api.support import bearer
from tests.db.logins import login_url
from tests.oidc_provider import OidcProvider
from tests.waiting import wait_for

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"
ALL_SETTINGS = (
    "ACHILLES_DATABASE_URL",
    "ACHILLES_API_OIDC_ISSUER",
    "ACHILLES_API_OIDC_AUDIENCE",
    "ACHILLES_API_OIDC_USER_CLAIM",
    "ACHILLES_API_OIDC_ALGORITHMS",
    "ACHILLES_API_KUBE_AUDIENCE",
    "ACHILLES_API_WEB_CLIENT_ID",
    "ACHILLES_API_WEB_CLIENT_SECRET",
    "ACHILLES_API_PUBLIC_URL",
    "ACHILLES_API_SESSION_SECRET",
    "ACHILLES_API_MAX_BODY_BYTES",
)


def run(env: dict[str, str], *args: str) -> Result:
    cleared: dict[str, str | None] = dict.fromkeys(ALL_SETTINGS)
    return CliRunner().invoke(cli, ["api", *args], env={**cleared, **env})


def one_error_line(result: Result, code: int) -> str:
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "ACHILLES_DATABASE_URL: not set"),
        ({"ACHILLES_DATABASE_URL": "mysql://x@h/d"}, "ACHILLES_DATABASE_URL:"),
        (
            {"ACHILLES_DATABASE_URL": UNREACHABLE, "ACHILLES_API_OIDC_ISSUER": "http://h"},
            "must be set together",
        ),
        (
            {"ACHILLES_DATABASE_URL": UNREACHABLE, "ACHILLES_API_OIDC_ALGORITHMS": "none"},
            "ACHILLES_API_OIDC_ALGORITHMS: each must be one of RS256",
        ),
        (
            {"ACHILLES_DATABASE_URL": UNREACHABLE, "ACHILLES_API_OIDC_ALGORITHMS": "HS256"},
            "ACHILLES_API_OIDC_ALGORITHMS",
        ),
        (
            {"ACHILLES_DATABASE_URL": UNREACHABLE, "ACHILLES_API_MAX_BODY_BYTES": "lots"},
            "ACHILLES_API_MAX_BODY_BYTES",
        ),
        (
            {"ACHILLES_DATABASE_URL": UNREACHABLE, "ACHILLES_API_WEB_CLIENT_ID": "web"},
            "also needs ACHILLES_API_WEB_CLIENT_SECRET",
        ),
    ],
)
def test_bad_settings_are_one_line_exit_2(env: dict[str, str], expected: str) -> None:
    assert expected in one_error_line(run(env), 2)


def test_a_busy_port_is_one_line_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            {"ACHILLES_DATABASE_URL": UNREACHABLE}, "--host", "127.0.0.1", "--port", str(port)
        )
    assert f"cannot listen on 127.0.0.1:{port}" in one_error_line(result, 1)


@pytest.fixture
def api_process(database_url: str, oidc_provider: OidcProvider, tmp_path: Path) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **{k: v for k, v in os.environ.items() if k not in ALL_SETTINGS},
        "ACHILLES_DATABASE_URL": login_url(database_url, Component.API),  # as installed
        "ACHILLES_API_OIDC_ISSUER": oidc_provider.issuer,
        "ACHILLES_API_OIDC_AUDIENCE": oidc_provider.audience,
        # A short deadline for a request's head, so the slowloris test waits 1 s.
        "ACHILLES_API_HEADER_TIMEOUT_SECONDS": "1",
    }
    log = (tmp_path / "api.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "achilles", "api", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url) or process.poll() is not None, 120, what="achilles api")
        assert process.poll() is None, (tmp_path / "api.log").read_text()
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        # A graceful stop: uvicorn finishes, then dies of the signal it was sent.
        assert process.wait(30) in (0, -signal.SIGTERM), (tmp_path / "api.log").read_text()
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_the_server_process_answers_a_real_token(api_process: str, tokens: Tokens) -> None:
    assert httpx.get(f"{api_process}/readyz", timeout=10).json() == {"status": "ready"}
    me = httpx.get(f"{api_process}/v1/me", headers=bearer(tokens("carol")), timeout=10)
    assert me.status_code == 200, me.text
    assert me.json()["user_key"] == "carol"
    anonymous = httpx.get(f"{api_process}/v1/me", timeout=10)
    assert anonymous.status_code == 401


def test_a_request_head_that_dribbles_in_is_cut_off(api_process: str) -> None:
    """Slowloris (issue 37): a connection whose request head is not whole within
    ACHILLES_API_HEADER_TIMEOUT_SECONDS is closed by the server; a prompt one is served."""
    host, port = api_process.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and no end of the head
        started = time.monotonic()
        assert slow.recv(1024) == b""  # closed by the server, not by our 10 s timeout
        assert time.monotonic() - started < 5
    with socket.create_connection((host, int(port)), timeout=10) as idle:
        assert idle.recv(1024) == b""  # a connection that never sends a byte: the same
    assert httpx.get(f"{api_process}/healthz", timeout=10).status_code == 200
