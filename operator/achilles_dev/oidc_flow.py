"""Real tokens from the dev and test OpenID Provider (achilles_dev/oidc.py runs it), and
what its clients share: its defaults, its discovery document, its errors.

`token_for` gets an access token the way a person's browser would, through the
provider's real authorization-code + PKCE flow over HTTP: the authorize request, the
sign-in form posted with the user key and password, the redirect carrying the code, and
the code exchanged at the token endpoint. No shortcut around the provider.
`sign_in_through` is a relying party's sign-in as a browser goes through it.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from achilles.errors import LocalStackError

# What the provider's flags default to (oidc_provider/main.go); the stack and the
# fixtures pass them explicitly.
DEV_PASSWORD = "achilles-dev"  # noqa: S105 - the dev stack's published password
API_AUDIENCE = "achilles-api"
USER_CLAIM = "sub"  # the access token's claim naming the user key
WEB_CLIENT_ID = "achilles-web"
WEB_CLIENT_SECRET = "achilles-web-dev-secret"  # noqa: S105 - the dev stack's published secret
CLI_CLIENT_ID = "achilles-cli"
# The CLI client's registered redirect URI (oidc_provider/store.go). Nothing listens
# there: `token_for` takes the code from the redirect's Location header.
CLI_REDIRECT_URI = "http://127.0.0.1/callback"
DISCOVERY_PATH = "/.well-known/openid-configuration"
_HTTP_TIMEOUT_S = 10.0


class SignInRefused(LocalStackError):
    """The provider refused the sign-in (a bad user key, a wrong password)."""


class OidcFlowError(LocalStackError):
    """The provider answered the flow in a way it never should (or did not answer)."""


def discovery(issuer: str, *, timeout: float = _HTTP_TIMEOUT_S) -> dict[str, object] | None:
    """The provider's discovery document, or None when it does not answer with one."""
    try:
        response = httpx.get(f"{issuer.rstrip('/')}{DISCOVERY_PATH}", timeout=timeout)
        document = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def is_serving(issuer: str) -> bool:
    """The provider at `issuer` answers its discovery document, naming itself."""
    document = discovery(issuer, timeout=2.0)
    return document is not None and document.get("issuer") == issuer


# --- the authorization-code + PKCE flow -----------------------------------------------


class _SignInForm(HTMLParser):
    """The provider's sign-in page: its form's action, hidden inputs and error text."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.hidden: dict[str, str] = {}
        self.fields: set[str] = set()
        self.messages: list[str] = []
        self._in_p = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "form" and self.action is None:
            self.action = attributes.get("action", "")
        elif tag == "input" and "name" in attributes:
            self.fields.add(attributes["name"])
            if attributes.get("type") == "hidden":
                self.hidden[attributes["name"]] = attributes.get("value", "")
        elif tag == "p":
            self._in_p = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "p":
            self._in_p = False

    def handle_data(self, data: str) -> None:
        if self._in_p and data.strip():
            self.messages.append(data.strip())


def _pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(64)  # 86 characters, within RFC 7636's 43..128
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


def _redirect(response: httpx.Response, step: str) -> str:
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise OidcFlowError(
            f"{step}: expected a redirect from {response.request.url}, got HTTP "
            f"{response.status_code}: {response.text[:300]!r}"
        )
    return urljoin(str(response.request.url), str(location))


def _endpoint(config: dict[str, object], name: str, issuer: str) -> str:
    value = config.get(name)
    if not isinstance(value, str):
        raise OidcFlowError(f"the discovery document of {issuer} has no {name}")
    return value


def token_for(
    issuer: str,
    user_key: str,
    *,
    password: str = DEV_PASSWORD,
    client_id: str = CLI_CLIENT_ID,
    client_secret: str | None = None,
    redirect_uri: str = CLI_REDIRECT_URI,
    scope: str = "openid profile",
) -> str:
    """An access token (a JWT) for `user_key`, through the provider's sign-in flow.

    Raises SignInRefused with the provider's own message when it refuses the user key or
    the password, and OidcFlowError when it does not answer as an OpenID Provider.
    """
    token = token_response_for(
        issuer,
        user_key,
        password=password,
        client_id=client_id,
        client_secret=client_secret,
        redirect_uri=redirect_uri,
        scope=scope,
    )
    access_token: str = token["access_token"]
    return access_token


def token_response_for(
    issuer: str,
    user_key: str,
    *,
    password: str = DEV_PASSWORD,
    client_id: str = CLI_CLIENT_ID,
    client_secret: str | None = None,
    redirect_uri: str = CLI_REDIRECT_URI,
    scope: str = "openid profile",
) -> dict[str, Any]:
    """The token endpoint's whole answer (`access_token`, `id_token`, ...) for `user_key`,
    through the provider's sign-in flow; errors as `token_for`."""
    config = discovery(issuer)
    if config is None:
        raise OidcFlowError(f"no OpenID Provider answers at {issuer}{DISCOVERY_PATH}")
    verifier, challenge = _pkce_pair()
    state = secrets.token_urlsafe(16)
    with httpx.Client(timeout=_HTTP_TIMEOUT_S, follow_redirects=False) as http:
        try:
            return _run_flow(
                http, config, issuer, user_key, password, client_id, client_secret,
                redirect_uri, scope, verifier, challenge, state,
            )  # fmt: skip
        except httpx.HTTPError as error:
            raise OidcFlowError(f"the OpenID Provider at {issuer} failed: {error}") from error


def _run_flow(
    http: httpx.Client,
    config: dict[str, object],
    issuer: str,
    user_key: str,
    password: str,
    client_id: str,
    client_secret: str | None,
    redirect_uri: str,
    scope: str,
    verifier: str,
    challenge: str,
    state: str,
) -> dict[str, Any]:
    authorize = http.get(
        _endpoint(config, "authorization_endpoint", issuer),
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": scope,
            "state": state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        },
    )
    login_page = http.get(_redirect(authorize, "authorize"))
    form = _SignInForm()
    form.feed(login_page.text)
    if login_page.status_code != 200 or form.action is None or "username" not in form.fields:
        raise OidcFlowError(
            f"expected the sign-in form at {login_page.request.url}, got HTTP "
            f"{login_page.status_code}: {login_page.text[:300]!r}"
        )
    signed_in = http.post(
        urljoin(str(login_page.request.url), form.action),
        data={**form.hidden, "username": user_key, "password": password},
    )
    if signed_in.status_code == 200:  # the form again, with the provider's reason
        again = _SignInForm()
        again.feed(signed_in.text)
        reason = "; ".join(again.messages) or "no reason given"
        raise SignInRefused(f"the OpenID Provider refused {user_key!r}: {reason}")
    callback = http.get(_redirect(signed_in, "sign-in"))
    target = _redirect(callback, "sign-in callback")
    if not target.startswith(redirect_uri):
        raise OidcFlowError(f"the provider redirected to {target!r}, not to {redirect_uri}")
    query = parse_qs(urlsplit(target).query)
    if "error" in query:
        detail = query.get("error_description", query["error"])[0]
        raise OidcFlowError(f"the provider refused the authorization: {detail}")
    if query.get("state") != [state] or len(query.get("code", [])) != 1:
        raise OidcFlowError(f"the provider's redirect lacks the code or the state: {target!r}")
    token = http.post(
        _endpoint(config, "token_endpoint", issuer),
        data={
            "grant_type": "authorization_code",
            "code": query["code"][0],
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            **({} if client_secret else {"client_id": client_id}),
        },
        auth=httpx.BasicAuth(client_id, client_secret)
        if client_secret
        else httpx.USE_CLIENT_DEFAULT,
    )
    body = (
        token.json() if token.headers.get("content-type", "").startswith("application/json") else {}
    )
    access_token = body.get("access_token") if isinstance(body, dict) else None
    if token.status_code != 200 or not isinstance(access_token, str):
        raise OidcFlowError(
            f"the token endpoint answered HTTP {token.status_code}: {token.text[:300]!r}"
        )
    answer: dict[str, Any] = body
    return answer


def sign_in_through(
    http: httpx.Client, login_url: str, user_key: str, *, password: str = DEV_PASSWORD
) -> httpx.Response:
    """A relying party's sign-in as a browser goes through it: from `login_url` (which
    redirects to the provider) through the provider's form and back to the relying
    party's callback; returns the callback's answer. `http` keeps the cookies."""
    response = http.get(login_url)
    while response.status_code in (301, 302, 303, 307, 308):
        response = http.get(_redirect(response, "sign-in"))
    form = _SignInForm()
    form.feed(response.text)
    if form.action is None or "username" not in form.fields:
        raise OidcFlowError(f"expected the sign-in form at {response.request.url}")
    response = http.post(
        urljoin(str(response.request.url), form.action),
        data={**form.hidden, "username": user_key, "password": password},
    )
    callback = urlsplit(login_url)._replace(path="/auth/callback", query="").geturl()
    while response.status_code in (301, 302, 303, 307, 308):
        target = _redirect(response, "sign-in")
        response = http.get(target)
        if target.startswith(callback):
            return response
    raise OidcFlowError(f"the sign-in did not come back to {callback}: HTTP {response.status_code}")
