"""The processes of `achilles bench api`: the real OIDC provider and `achilles api` itself,
each started for the benchmark and stopped after it."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from achilles_dev import oidc
from achilles_dev.ports import free_port
from bench.report import Progress

START_TIMEOUT_S = 60.0
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ApiProcess:
    url: str
    pid: int

    def cpu_seconds(self) -> float:
        """User + system CPU the process (all its threads) has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND


@contextmanager
def oidc_provider(workdir: Path, progress: Progress) -> Iterator[oidc.RunningProvider]:
    port = free_port()
    settings = oidc.ProviderSettings(issuer=f"http://127.0.0.1:{port}", listen=f"127.0.0.1:{port}")
    running = oidc.start(settings, log=workdir / "oidc-provider.log")
    progress(f"OIDC provider at {running.issuer}")
    try:
        yield running
    finally:
        running.stop()


@contextmanager
def api_process(
    database_url: str, provider: oidc.RunningProvider, workdir: Path, progress: Progress
) -> Iterator[ApiProcess]:
    """`achilles api` in a process of its own, as the chart runs it."""
    port = free_port()
    env = {
        **os.environ,
        "ACHILLES_DATABASE_URL": database_url,
        "ACHILLES_API_OIDC_ISSUER": provider.issuer,
        "ACHILLES_API_OIDC_AUDIENCE": provider.settings.api_audience,
        "ACHILLES_API_OIDC_USER_CLAIM": oidc.USER_CLAIM,
        # The bench measures what requests cost, not the limits that bound them (a
        # reader's samples come faster than a person's 600 a minute).
        "ACHILLES_API_RATE_LIMIT_USER": "0",
        "ACHILLES_API_AUTH_FAILURE_LIMIT": "0",
        "ACHILLES_API_MAX_STREAMS_PER_USER": "1000",
    }
    for name in ("ACHILLES_API_WEB_CLIENT_ID", "ACHILLES_API_KUBE_AUDIENCE", "KUBECONFIG"):
        env.pop(name, None)
    command = [str(Path(sys.executable).with_name("achilles")), "api", "--host", "127.0.0.1"]
    log = workdir / "api.log"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(url):
            if process.poll() is not None:
                raise RuntimeError(f"achilles api exited ({process.returncode}): {_tail(log)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"achilles api did not answer in {START_TIMEOUT_S:.0f}s")
            time.sleep(0.1)  # a probe's poll interval
        progress(f"achilles api (pid {process.pid}) at {url}")
        yield ApiProcess(url, process.pid)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-20:])


def raise_open_files_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
