"""The chart's values for a local stack: which components run (the operator and API
Deployments on a real node with a database, the migrations with a database), the locally
built image, and the API as the dev stack exposes it (a NodePort, the stack's OIDC
provider for people and its web inbox).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from achilles_dev.chart_secrets import (
    API_SESSION_SECRET,
    API_SESSION_SECRET_KEY,
    API_WEB_CLIENT_SECRET,
    API_WEB_CLIENT_SECRET_KEY,
)
from achilles_dev.config import API_NODE_PORT

if TYPE_CHECKING:
    from achilles_dev.stack import LocalStack


@dataclass(frozen=True)
class LocalApi:
    """How a local stack runs the API: whom it trusts and where people reach it."""

    oidc_issuer: str  # the stack's OpenID Provider, as pods reach it (and tokens name it)
    public_url: str  # the URL the host's curl and browser use: the NodePort on the node IP
    node_port: int


def local_values(
    *, with_database: bool, image: str | None = None, api: LocalApi | None = None
) -> dict[str, Any]:
    """The chart's values for a local stack: the operator and API Deployments and the
    migrations when a real node and a database run.

    `image` is the locally built engine image (`repository:tag`) a real node runs the
    chart's Jobs from; without it (a stack with no node) nothing of the chart runs. `api`
    turns the API on (with the stack's OIDC provider for people and its web inbox);
    without it the API is off.
    """
    on_node = image is not None and with_database
    values: dict[str, Any] = {
        # The operator runs as the chart's Deployment, from the engine image, where a real
        # node can run that image and a database is there for it; elsewhere (a benchmark's
        # stack without a node) it runs as a local process (`achilles operator`).
        "operator": {"enabled": on_node},
        "api": {"enabled": on_node and api is not None},
        "migrations": {"enabled": with_database},
    }
    if image is not None:
        repository, _, tag = image.rpartition(":")
        values["image"] = {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}
    if on_node and api is not None:
        values["api"] = local_api_values(api)
    return values


def local_api_values(api: LocalApi) -> dict[str, Any]:
    """The API as the dev stack runs it: a NodePort the host reaches, people's tokens and
    the web inbox's sign-in from the stack's provider (its published dev client)."""
    from achilles_dev import oidc

    return {
        "enabled": True,
        "service": {"type": "NodePort", "nodePort": api.node_port},
        "oidc": {
            "issuer": api.oidc_issuer,
            "audience": oidc.API_AUDIENCE,
            "userClaim": oidc.USER_CLAIM,
        },
        "web": {
            "enabled": True,
            "publicURL": api.public_url,
            "clientId": oidc.WEB_CLIENT_ID,
            "clientSecret": {
                "secretName": API_WEB_CLIENT_SECRET,
                "key": API_WEB_CLIENT_SECRET_KEY,
            },
            "sessionSecret": {"secretName": API_SESSION_SECRET, "key": API_SESSION_SECRET_KEY},
        },
    }


def stack_api(stack: LocalStack) -> LocalApi | None:
    """The API of a stack with a real node and PostgreSQL (and so the OIDC provider)."""
    config = stack.config
    if not (config.real_node and stack.with_postgres):
        return None
    return LocalApi(
        oidc_issuer=config.oidc_issuer, public_url=config.api_url, node_port=API_NODE_PORT
    )
