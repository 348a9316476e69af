"""The API's settings: one model, read once from the environment at start.

`achilles api` (and a pod running it) configures everything through `ACHILLES_*`
variables; a missing or malformed one is a `ConfigurationError` naming the variable, which
the CLI prints as one line with exit code 2. Nothing is read from the environment later.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from achilles.errors import ConfigurationError, InvalidInputError

# The signing algorithms a bearer token may use. Asymmetric only: an HS* token would be
# "signed" with a secret the verifier shares (and a public key is no secret), and `none`
# is no signature at all.
ALLOWED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")
# The claim naming the user key when ACHILLES_API_OIDC_USER_CLAIM is not set: `sub` is the
# one claim every OIDC provider puts in an access token and never reassigns.
DEFAULT_USER_CLAIM = "sub"
# The username prefix clusters commonly give OIDC users (kube-apiserver --oidc-username-prefix).
DEFAULT_KUBE_USER_PREFIX = "oidc:"
# Request bodies larger than this are refused with 413 before they are read whole.
DEFAULT_MAX_BODY_BYTES = 64 * 1024
# The web session cookie's signing key: long enough that guessing it is no attack
# (`python -c "import secrets; print(secrets.token_urlsafe(48))"` makes a good one).
MIN_SESSION_SECRET_LENGTH = 32

# field name -> environment variable.
ENVIRONMENT: dict[str, str] = {
    "database_url": "ACHILLES_DATABASE_URL",
    "oidc_issuer": "ACHILLES_API_OIDC_ISSUER",
    "oidc_audience": "ACHILLES_API_OIDC_AUDIENCE",
    "oidc_user_claim": "ACHILLES_API_OIDC_USER_CLAIM",
    "oidc_algorithms": "ACHILLES_API_OIDC_ALGORITHMS",
    "oidc_clients": "ACHILLES_API_OIDC_CLIENTS",
    "kube_audience": "ACHILLES_API_KUBE_AUDIENCE",
    "kube_user_prefix": "ACHILLES_API_KUBE_USER_PREFIX",
    "kubeconfig": "KUBECONFIG",
    "max_body_bytes": "ACHILLES_API_MAX_BODY_BYTES",
    "web_client_id": "ACHILLES_API_WEB_CLIENT_ID",
    "web_client_secret": "ACHILLES_API_WEB_CLIENT_SECRET",
    "public_url": "ACHILLES_API_PUBLIC_URL",
    "session_secret": "ACHILLES_API_SESSION_SECRET",
    "sse_keepalive_seconds": "ACHILLES_API_SSE_KEEPALIVE_SECONDS",
    "rate_limit_user": "ACHILLES_API_RATE_LIMIT_USER",
    "rate_limit_client": "ACHILLES_API_RATE_LIMIT_CLIENT",
    "auth_failure_limit": "ACHILLES_API_AUTH_FAILURE_LIMIT",
    "max_streams_per_user": "ACHILLES_API_MAX_STREAMS_PER_USER",
    "header_timeout_seconds": "ACHILLES_API_HEADER_TIMEOUT_SECONDS",
}
# Settings given as comma-separated lists in the environment.
_LISTS = frozenset({"oidc_algorithms", "oidc_clients"})

Algorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384"]


def _http_url(value: str, field: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s):// URL (got {value!r})")
    return value.rstrip("/") if field == "public_url" else value


class ApiSettings(BaseModel):
    """Everything `achilles api` needs; see docs/api.md for each variable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str
    # People: OIDC bearer tokens. Both issuer and audience, or neither (then no OIDC).
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_user_claim: str = DEFAULT_USER_CLAIM
    oidc_algorithms: Annotated[tuple[Algorithm, ...], Field(min_length=1)] = ("RS256",)
    # The clients (`azp`, else `client_id`) whose access tokens are accepted; empty: any.
    oidc_clients: tuple[str, ...] = ()
    # The portal: Kubernetes ServiceAccount tokens, checked by TokenReview for this audience.
    kube_audience: str | None = None
    # How Kubernetes RBAC names a person of user key K for the admin check: PREFIX + K.
    kube_user_prefix: str = DEFAULT_KUBE_USER_PREFIX
    kubeconfig: str | None = None
    max_body_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = DEFAULT_MAX_BODY_BYTES
    # GET /v1/events: a keepalive comment this often, so proxies keep an idle stream open.
    sse_keepalive_seconds: Annotated[float, Field(ge=0.1, le=300)] = 15.0
    # Rate limits (`achilles.api.throttle`): `N/second|minute|hour`, or 0 for none.
    rate_limit_user: str = "600/minute"
    rate_limit_client: str = "0"  # off: behind an Ingress or the portal, one address is many people
    auth_failure_limit: str = "30/minute"
    # Open event streams a person may hold at once (each replica counts its own).
    max_streams_per_user: Annotated[int, Field(ge=1, le=1000)] = 5
    # A request's head (request line and headers) must arrive within this long of its
    # first byte or of the connection (slowloris); uvicorn closes the connection then.
    header_timeout_seconds: Annotated[float, Field(ge=0.5, le=300)] = 10.0
    # The web inbox (the web helper's `install_web`); on when web_client_id is set.
    web_client_id: str | None = None
    web_client_secret: SecretStr | None = None
    public_url: str | None = None
    session_secret: SecretStr | None = None

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        from achilles.db.database import parse_url

        try:
            parse_url(value)
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from exc
        return value

    @field_validator("oidc_issuer", "public_url")
    @classmethod
    def _url(cls, value: str | None, info: object) -> str | None:
        field = getattr(info, "field_name", "")
        return None if value is None else _http_url(value, field)

    @field_validator("oidc_user_claim", "oidc_audience", "kube_audience", "web_client_id")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("rate_limit_user", "rate_limit_client", "auth_failure_limit")
    @classmethod
    def _limit(cls, value: str) -> str:
        from achilles.api.throttle import parse_limit

        try:
            parse_limit(value)
        except ValueError as exc:
            raise ValueError(
                f"must be N/second, N/minute or N/hour (or 0: no limit); got {value!r}"
            ) from exc
        return value

    @field_validator("session_secret")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_SESSION_SECRET_LENGTH:
            raise ValueError(
                f"must be at least {MIN_SESSION_SECRET_LENGTH} characters (it signs the web"
                " session cookie); e.g. the output of"
                ' python -c "import secrets; print(secrets.token_urlsafe(48))"'
            )
        return value

    @property
    def kubeconfig_path(self) -> Path | None:
        return Path(self.kubeconfig) if self.kubeconfig else None

    @property
    def oidc_enabled(self) -> bool:
        return self.oidc_issuer is not None

    @property
    def kube_enabled(self) -> bool:
        return self.kube_audience is not None

    @property
    def web_enabled(self) -> bool:
        return self.web_client_id is not None

    @model_validator(mode="after")
    def _combinations(self) -> ApiSettings:
        if (self.oidc_issuer is None) != (self.oidc_audience is None):
            raise ValueError(
                f"{ENVIRONMENT['oidc_issuer']} and {ENVIRONMENT['oidc_audience']}"
                " must be set together (the audience a token must carry is part of trusting"
                " an issuer)"
            )
        if self.web_enabled:
            missing = [
                ENVIRONMENT[name]
                for name in ("web_client_secret", "public_url", "session_secret", "oidc_issuer")
                if getattr(self, name) is None
            ]
            if missing:
                raise ValueError(
                    f"the web inbox ({ENVIRONMENT['web_client_id']} is set) also needs "
                    + ", ".join(missing)
                )
        return self


def _from_environment(environ: Mapping[str, str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for field, variable in ENVIRONMENT.items():
        raw = environ.get(variable)
        if raw is None or raw == "":
            continue
        if field in _LISTS:
            values[field] = tuple(part.strip() for part in raw.split(",") if part.strip())
        else:
            values[field] = raw
    return values


def load_settings(environ: Mapping[str, str]) -> ApiSettings:
    """The settings from `environ`; a missing or malformed variable is one
    `ConfigurationError` that names it."""
    try:
        return ApiSettings.model_validate(_from_environment(environ))
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        variable = ENVIRONMENT.get(field, field)
        if error["type"] == "missing":
            raise ConfigurationError(f"{variable}: not set") from None
        message = str(error["msg"]).removeprefix("Value error, ")
        if not field:
            raise ConfigurationError(message) from None
        if field == "oidc_algorithms":
            message = f"each must be one of {', '.join(ALLOWED_ALGORITHMS)}"
        raw = environ.get(variable, "")
        shown = "" if field in ("database_url",) or "secret" in field else f" (got {raw!r})"
        shown = "" if shown and repr(raw) in message else shown
        raise ConfigurationError(f"{variable}: {message}{shown}") from None
