"""The dev and test OpenID Provider as a process, and real tokens from it.

The provider (`oidc_provider/`, zitadel/oidc's example OP with our users and clients,
built by `oidc_build`) signs RS256 JWT access tokens whose `sub` is the user key and
whose `aud` holds the API audience. Anyone may sign in as any valid user key with the
one dev password: it is for the local stack and the tests only, never in an image.

`token_for` gets an access token the way a person's browser would, through the
provider's real authorization-code + PKCE flow (achilles_dev/oidc_flow.py, whose names
this module re-exports). No shortcut around the provider.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.config import LOOPBACK, StackConfig
from achilles_dev.oidc_build import ensure_provider_built

# The provider's defaults, discovery and sign-in flow (achilles_dev/oidc_flow.py),
# re-exported: the stack, the CLI and the tests name them here.
from achilles_dev.oidc_flow import API_AUDIENCE as API_AUDIENCE
from achilles_dev.oidc_flow import CLI_CLIENT_ID as CLI_CLIENT_ID
from achilles_dev.oidc_flow import CLI_REDIRECT_URI as CLI_REDIRECT_URI
from achilles_dev.oidc_flow import DEV_PASSWORD as DEV_PASSWORD
from achilles_dev.oidc_flow import DISCOVERY_PATH as DISCOVERY_PATH
from achilles_dev.oidc_flow import USER_CLAIM as USER_CLAIM
from achilles_dev.oidc_flow import WEB_CLIENT_ID as WEB_CLIENT_ID
from achilles_dev.oidc_flow import WEB_CLIENT_SECRET as WEB_CLIENT_SECRET
from achilles_dev.oidc_flow import OidcFlowError as OidcFlowError
from achilles_dev.oidc_flow import SignInRefused as SignInRefused
from achilles_dev.oidc_flow import discovery as discovery
from achilles_dev.oidc_flow import is_serving as is_serving
from achilles_dev.oidc_flow import sign_in_through as sign_in_through
from achilles_dev.oidc_flow import token_for as token_for
from achilles_dev.oidc_flow import token_response_for as token_response_for
from achilles_dev.processes import ProcessRef, is_alive, reference, stop_group
from achilles_dev.waiting import wait_until

START_TIMEOUT_S = 30.0


def web_redirect_globs(*hosts: str) -> tuple[str, ...]:
    """The web inbox's redirect URIs on any port of these hosts (`/auth/callback`)."""
    return tuple(f"http://{host}:*/auth/callback" for host in hosts)


@dataclass(frozen=True)
class ProviderSettings:
    """How one provider process runs: where it listens and what it issues."""

    issuer: str  # tokens' `iss`, exactly; must reach `listen`
    listen: str  # host:port
    api_audience: str = API_AUDIENCE
    dev_password: str = DEV_PASSWORD
    web_client_id: str = WEB_CLIENT_ID
    web_client_secret: str = WEB_CLIENT_SECRET
    web_redirect_uris: tuple[str, ...] = field(
        default_factory=lambda: web_redirect_globs("127.0.0.1", "localhost")
    )
    cli_client_id: str = CLI_CLIENT_ID
    # How long an access token lives, in seconds; None: the provider's hour.
    access_token_lifetime: int | None = None

    def argv(self, binary: Path) -> list[str]:
        argv = [
            str(binary),
            "-listen", self.listen,
            "-issuer", self.issuer,
            "-api-audience", self.api_audience,
            "-web-client-id", self.web_client_id,
            "-cli-client-id", self.cli_client_id,
        ]  # fmt: skip
        for uri in self.web_redirect_uris:
            argv += ["-web-redirect-uri", uri]
        if self.access_token_lifetime is not None:
            argv += ["-access-token-lifetime", f"{self.access_token_lifetime}s"]
        return argv

    def env(self) -> dict[str, str]:
        """The secrets go by environment, not argv (which `ps` shows)."""
        return {
            "ACHILLES_OIDC_DEV_PASSWORD": self.dev_password,
            "ACHILLES_OIDC_WEB_CLIENT_SECRET": self.web_client_secret,
        }


def stack_provider_settings(config: StackConfig) -> ProviderSettings:
    """The local stack's provider: on the host address pods reach (and the host's browser
    and curl), the web inbox's redirect URIs on any port of that address, of loopback and,
    with a real node, of the node's IP (where the chart's API answers: `config.api_url`)."""
    host = config.apiserver_host
    # With a real node, the chart's API (its web inbox) is reached at the node's IP.
    hosts = (host, LOOPBACK, "localhost", *((config.network.node_ip,) if config.real_node else ()))
    return ProviderSettings(
        issuer=config.oidc_issuer,
        listen=f"{host}:{config.ports.oidc_provider}",
        web_redirect_uris=web_redirect_globs(*dict.fromkeys(hosts)),
    )


@dataclass
class RunningProvider:
    """A provider process `start` started; `stop` ends it."""

    settings: ProviderSettings
    process: ProcessRef
    log: Path

    @property
    def issuer(self) -> str:
        return self.settings.issuer

    def token_for(self, user_key: str) -> str:
        return token_for(self.issuer, user_key, password=self.settings.dev_password)

    def stop(self) -> None:
        stop_group(self.process, grace=5.0, what="the OIDC provider")


def start(settings: ProviderSettings, *, log: Path) -> RunningProvider:
    """Build the provider if needed, start it, and wait until it serves discovery."""
    binary = ensure_provider_built(report=lambda line: print(line, flush=True))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as output:
        popen = subprocess.Popen(
            settings.argv(binary),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **settings.env()},
            start_new_session=True,
        )
    process = reference(popen.pid) or ProcessRef(pid=popen.pid, start_ticks=-1)
    running = RunningProvider(settings, process, log)

    def ready() -> bool:
        if popen.poll() is not None:
            raise LocalStackError(
                f"the OIDC provider exited at start (exit {popen.returncode}); "
                f"its log {log}:\n{_tail(log)}"
            )
        return is_serving(settings.issuer)

    try:
        wait_until(ready, timeout=START_TIMEOUT_S, what=f"the OIDC provider at {settings.issuer}")
    except LocalStackError:
        if is_alive(process):
            running.stop()
        raise
    return running


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
