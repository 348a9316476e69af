"""Typed doorways into the parts of the kubernetes client that carry no annotations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client, config


def api_client(kubeconfig: Path) -> client.ApiClient:
    """A client authenticated by `kubeconfig` (its own connection pool)."""
    made: client.ApiClient = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return made


def json_body(response: Any) -> Any:
    """The decoded body of a call made with `_preload_content=False`."""
    return json.loads(response.data)


def to_dict(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    """A model as the API's JSON (camelCase keys)."""
    result: dict[str, Any] = api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return result
