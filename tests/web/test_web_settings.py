"""The web inbox's settings: refused at start with one line naming the variable."""

from __future__ import annotations

import pytest

from achilles.api.settings import MIN_SESSION_SECRET_LENGTH, load_settings
from achilles.errors import ConfigurationError

WEB = {
    "ACHILLES_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    "ACHILLES_API_OIDC_ISSUER": "http://127.0.0.1:5556",
    "ACHILLES_API_OIDC_AUDIENCE": "achilles-api",
    "ACHILLES_API_WEB_CLIENT_ID": "achilles-web",
    "ACHILLES_API_WEB_CLIENT_SECRET": "client-secret",
    "ACHILLES_API_PUBLIC_URL": "http://127.0.0.1:8000/",
}


def test_a_short_session_secret_is_refused_without_showing_it() -> None:
    short = "s3cr3t" * 5
    assert len(short) < MIN_SESSION_SECRET_LENGTH
    with pytest.raises(ConfigurationError) as refused:
        load_settings({**WEB, "ACHILLES_API_SESSION_SECRET": short})
    message = str(refused.value)
    assert message.startswith("ACHILLES_API_SESSION_SECRET: must be at least 32 characters")
    assert short not in message


def test_web_settings_are_read() -> None:
    secret = "x" * MIN_SESSION_SECRET_LENGTH
    settings = load_settings({**WEB, "ACHILLES_API_SESSION_SECRET": secret})
    assert settings.web_enabled
    assert settings.public_url == "http://127.0.0.1:8000"  # redirect_uri = this + /auth/callback
    assert settings.session_secret is not None
    assert settings.session_secret.get_secret_value() == secret
