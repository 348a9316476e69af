"""The issuer's keys (issue 37, item 3), against the real OIDC provider behind a proxy
that can hold its key set's answer and say how long to keep it.

- A slow issuer never stalls the API: a token naming an unknown `kid` makes a refetch,
  and while the issuer takes its time `/healthz` and tokens signed with known keys are
  answered at once (before, the refetch held a lock the event loop then waited for).
- A key the issuer withdrew stops verifying once the key set's `max-age` is up (before,
  keys were kept until the API restarted).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from achilles.api.app import create_app
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from achilles_dev import oidc
from achilles_dev.ports import free_port
from tests.api.support import RecordingRunRequester, bearer, served
from tests.waiting import wait_for

HOP_HEADERS = {"connection", "content-length", "content-encoding", "transfer-encoding", "host"}
# How long the proxy holds the key set's answer (released earlier by the test).
HELD_SECONDS = 30.0
# An answer the event loop gives at once takes milliseconds; a stalled one, the hold.
PROMPT_SECONDS = 2.0


@dataclass
class KeySetControl:
    """What the proxy does to the provider's key set (`/keys`) answers."""

    hold: bool = False
    max_age: int | None = None
    held: threading.Event = field(default_factory=threading.Event)  # one arrived, held
    release: threading.Event = field(default_factory=threading.Event)


def _proxy_handler(upstream: str, control: KeySetControl) -> type[BaseHTTPRequestHandler]:
    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            is_key_set = self.path.split("?")[0].endswith("/keys")
            if is_key_set and control.hold:
                control.held.set()
                control.release.wait(HELD_SECONDS)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            answer = httpx.request(
                self.command, upstream + self.path, headers=headers, content=body, timeout=10
            )
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in HOP_HEADERS | {"cache-control"}:
                    self.send_header(name, value)
            if is_key_set and control.max_age is not None:
                self.send_header("Cache-Control", f"max-age={control.max_age}")
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

    return Proxy


@dataclass
class ProxiedProvider:
    settings: oidc.ProviderSettings
    control: KeySetControl
    log: Path
    running: oidc.RunningProvider

    @property
    def issuer(self) -> str:
        return self.settings.issuer

    def token(self, user_key: str) -> str:
        return oidc.token_for(self.issuer, user_key, password=self.settings.dev_password)

    def restart(self) -> None:
        """A new provider process: a new signing key, the old one withdrawn."""
        self.running.stop()
        self.running = oidc.start(self.settings, log=self.log)


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[ProxiedProvider]:
    control = KeySetControl()
    provider_port = free_port()
    proxy = ThreadingHTTPServer(
        ("127.0.0.1", 0), _proxy_handler(f"http://127.0.0.1:{provider_port}", control)
    )
    proxy.daemon_threads = True
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    settings = oidc.ProviderSettings(
        issuer=f"http://127.0.0.1:{proxy.server_address[1]}",
        listen=f"127.0.0.1:{provider_port}",
        web_client_secret="a-web-secret-of-the-tests",
    )
    log = tmp_path / "provider.log"
    found = ProxiedProvider(settings, control, log, oidc.start(settings, log=log))
    try:
        yield found
    finally:
        control.release.set()
        found.running.stop()
        proxy.shutdown()
        proxy.server_close()


@pytest.fixture
def api_url(
    provider: ProxiedProvider, api_settings: ApiSettings, api_database: Database, db: Engine
) -> Iterator[str]:
    settings = api_settings.model_copy(
        update={"oidc_issuer": provider.issuer, "oidc_audience": provider.settings.api_audience}
    )
    with served(create_app(settings, api_database, run_requester=RecordingRunRequester())) as url:
        yield url


def _unknown_kid_token(issuer: str) -> str:
    """A token of the issuer naming a key it never had (its signature is never reached)."""

    def part(value: Mapping[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    now = int(time.time())
    claims = {"iss": issuer, "sub": "mallory", "aud": "achilles-api", "exp": now + 60}
    header = {"alg": "RS256", "kid": f"made-up-{uuid.uuid4().hex}"}
    return f"{part(header)}.{part(claims)}.c2lnbmF0dXJl"


def _elapsed(url: str, headers: dict[str, str]) -> tuple[int, float]:
    started = time.monotonic()
    response = httpx.get(url, headers=headers, timeout=PROMPT_SECONDS + 1)
    return response.status_code, time.monotonic() - started


def test_a_slow_issuer_stalls_nothing(provider: ProxiedProvider, api_url: str) -> None:
    alice = bearer(provider.token("alice"))
    assert httpx.get(f"{api_url}/v1/me", headers=alice, timeout=10).status_code == 200
    provider.control.hold = True
    stop = threading.Event()

    def probe() -> None:
        # Made-up kids, as an attacker sends them: one refetch once the interval is up.
        while not stop.is_set():
            httpx.get(
                f"{api_url}/v1/me",
                headers=bearer(_unknown_kid_token(provider.issuer)),
                timeout=HELD_SECONDS + 5,
            )
            stop.wait(0.5)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        assert provider.control.held.wait(30), "no refetch of the key set"
        health = _elapsed(f"{api_url}/healthz", {})
        known = _elapsed(f"{api_url}/v1/me", alice)
    finally:
        stop.set()
        provider.control.release.set()
        prober.join(HELD_SECONDS + 10)
    assert health[0] == 200
    assert health[1] < PROMPT_SECONDS
    assert known[0] == 200
    assert known[1] < PROMPT_SECONDS


def test_a_withdrawn_key_stops_verifying_when_the_issuers_max_age_is_up(
    provider: ProxiedProvider, api_url: str
) -> None:
    provider.control.max_age = 1  # kept the API's minimum, the refetch interval (10 s)
    old = bearer(provider.token("alice"))
    assert httpx.get(f"{api_url}/v1/me", headers=old, timeout=10).status_code == 200

    provider.restart()  # its new key replaces the old one in its key set
    new = bearer(provider.token("alice"))

    wait_for(
        lambda: httpx.get(f"{api_url}/v1/me", headers=old, timeout=10).status_code == 401,
        40,
        what="the withdrawn key to stop verifying",
    )
    assert httpx.get(f"{api_url}/v1/me", headers=new, timeout=10).status_code == 200
