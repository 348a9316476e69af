"""`achilles operator` and `achilles api`, the real processes, given the tests' superuser:
one line saying why and exit 1, before they serve anything; with
ACHILLES_ALLOW_SUPERUSER=true they start (saying that they run anyway); the API with a
login of its own starts without a word about it.

The operator checks its login after reading the kubeconfig and before it talks to the
cluster: a kubeconfig naming a cluster nobody serves is enough here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from achilles.db.roles import Component
from achilles_dev.ports import free_port
from tests.db.logins import login_url
from tests.dead_cluster import write_kubeconfig
from tests.waiting import wait_for

ACHILLES = str(Path(sys.executable).with_name("achilles"))
ALLOW = "ACHILLES_ALLOW_SUPERUSER"
ANYWAY = f"running anyway ({ALLOW}=true)"


def environment(database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACHILLES_", "KUBERNETES_")) and k != "KUBECONFIG"
    }
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig")
    return {
        **clean,
        "ACHILLES_DATABASE_URL": database_url,
        "KUBECONFIG": str(kubeconfig),
        "ACHILLES_METRICS_PORT": "0",
        **extra,
    }


def operator_argv() -> list[str]:
    return [ACHILLES, "operator", "--liveness", ""]


def api_argv(port: int) -> list[str]:
    return [ACHILLES, "api", "--host", "127.0.0.1", "--port", str(port)]


def refusal(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 1, done.stderr
    (line,) = lines
    return line


@pytest.mark.parametrize(
    ("component", "argv"),
    [("operator", operator_argv()), ("api", api_argv(0))],
)
def test_a_superuser_login_is_refused_saying_why(
    component: str, argv: list[str], database_url: str, tmp_path: Path
) -> None:
    line = refusal(argv, environment(database_url, tmp_path))
    assert line.startswith(f"error: the {component}'s database login 'postgres' is a superuser")
    assert f"achilles db login {component} LOGIN" in line
    assert f"{ALLOW}=true for a first try" in line


@contextmanager
def started(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def test_the_operator_runs_as_a_superuser_when_allowed(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "operator.log"
    env = environment(database_url, tmp_path, **{ALLOW: "true"})
    with started(operator_argv(), env, log) as process:
        wait_for(
            lambda: ANYWAY in log.read_text() or process.poll() is not None,
            60,
            what="the operator past its login check",
        )
        assert process.poll() is None, log.read_text()
        assert "is a superuser" in log.read_text()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("login", ["superuser, allowed", "its own"])
def test_the_api_starts_as_its_own_login_or_an_allowed_superuser(
    login: str, database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if login == "its own":
        env = environment(login_url(database_url, Component.API), tmp_path)
    else:
        env = environment(database_url, tmp_path, **{ALLOW: "true"})
    log = tmp_path / "api.log"
    with started(api_argv(port), env, log) as process:
        wait_for(lambda: _ready(url) or process.poll() is not None, 60, what="achilles api")
        assert process.poll() is None, log.read_text()
    said = log.read_text()
    assert (ANYWAY in said) == (login != "its own"), said
