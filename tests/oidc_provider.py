"""The `oidc_provider` session fixture: a real OpenID Provider for every tier.

The provider is zitadel/oidc's example OP with Achilles' users and clients
(operator/achilles_dev/oidc_provider, see docs/development.md), built once per machine
from the Go module proxy (a fresh machine builds it in the first session that needs it)
and started per pytest session on a free port. Registered for every tier in
tests/conftest.py (`pytest_plugins`).

What a test gets (`OidcProvider`):

* `issuer` -- `http://127.0.0.1:<port>`, exactly the tokens' `iss` (no trailing slash);
  `discovery_url`, `jwks_uri`.
* `audience` -- in every access token's `aud` (beside the client id).
* `user_claim` -- `sub`: the claim naming the user key.
* `token_for(user_key)` -- an RS256 JWT access token for that user key, obtained through
  the provider's real authorization-code + PKCE flow (sign-in form and all). Any valid
  user key signs in; a bad one raises `achilles_dev.oidc.SignInRefused`.
* `login_password` -- the one dev password of the sign-in form (any valid user key).
* `web_client_id`, `web_client_secret` -- the web inbox's confidential client
  (client_secret_basic or client_secret_post; authorization code, PKCE welcome). Its
  redirect URIs are fixed patterns: `http://127.0.0.1:<any port>/auth/callback` and
  `http://localhost:<any port>/auth/callback` (`web_redirect_uri_patterns`), so a web
  app on any free port signs in without registering anything.
* `cli_client_id` -- the public client `token_for` uses.

Access tokens live an hour; the provider's signing key is made when it starts (one per
session), published at `jwks_uri`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from achilles_dev import oidc
from achilles_dev.ports import free_port


@dataclass(frozen=True)
class OidcProvider:
    settings: oidc.ProviderSettings
    log: Path

    @property
    def issuer(self) -> str:
        return self.settings.issuer

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}{oidc.DISCOVERY_PATH}"

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/keys"

    @property
    def audience(self) -> str:
        return self.settings.api_audience

    @property
    def user_claim(self) -> str:
        return oidc.USER_CLAIM

    @property
    def login_password(self) -> str:
        return self.settings.dev_password

    @property
    def web_client_id(self) -> str:
        return self.settings.web_client_id

    @property
    def web_client_secret(self) -> str:
        return self.settings.web_client_secret

    @property
    def web_redirect_uri_patterns(self) -> tuple[str, ...]:
        return self.settings.web_redirect_uris

    @property
    def cli_client_id(self) -> str:
        return self.settings.cli_client_id

    def token_for(self, user_key: str) -> str:
        return oidc.token_for(self.issuer, user_key, password=self.login_password)


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    port = free_port()
    settings = oidc.ProviderSettings(
        issuer=f"http://127.0.0.1:{port}",
        listen=f"127.0.0.1:{port}",
        # Per session, so a test can never pass on another session's secret.
        web_client_secret=f"web-secret-{os.getpid()}-{uuid.uuid4().hex[:8]}",
    )
    log = tmp_path_factory.mktemp("oidc-provider") / "oidc-provider.log"
    running = oidc.start(settings, log=log)
    try:
        yield OidcProvider(settings, log)
    finally:
        running.stop()
