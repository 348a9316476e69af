"""The achilles.io API as the tests use it: create, apply, patch, read; errors as messages.

Every write asks for strict field validation, as kubectl does by default, so an unknown
field is an error rather than silently pruned. Identities other than the admin are
impersonated (the admin kubeconfig may impersonate anyone).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.client import api_client, json_body
from achilles.k8s.resources import KINDS
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import Scope

PLURALS = {kind.kind: kind.plural for kind in KINDS}
NAMESPACED = {kind.kind for kind in KINDS if kind.scope is Scope.NAMESPACED}
FIELD_MANAGER = "achilles-tests"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def impersonating(kubeconfig: Path, user: str, group: str | None = None) -> client.ApiClient:
    """A client that acts as `user` (in `group`), through the admin's impersonate right."""
    impersonated = api_client(kubeconfig)
    impersonated.default_headers["Impersonate-User"] = user
    if group is not None:
        impersonated.default_headers["Impersonate-Group"] = group
    return impersonated


class Achilles:
    """CRUD on the four kinds through one client (one identity)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)

    def _where(self, kind: str, namespace: str | None) -> dict[str, Any]:
        where: dict[str, Any] = {
            "group": API_GROUP,
            "version": API_VERSION_NAME,
            "plural": PLURALS[kind],
        }
        if kind in NAMESPACED:
            if namespace is None:
                raise ValueError(f"{kind} is namespaced; give a namespace")
            where["namespace"] = namespace
        return where

    def _call(self, verb: str, kind: str, namespace: str | None, **kwargs: Any) -> Any:
        scope = "namespaced" if kind in NAMESPACED else "cluster"
        method = getattr(self.custom, f"{verb}_{scope}_custom_object")
        return method(**self._where(kind, namespace), **kwargs)

    def create(
        self, manifest: dict[str, Any], namespace: str | None = None, *, dry_run: bool = False
    ) -> dict[str, Any]:
        created: dict[str, Any] = self._call(
            "create",
            manifest["kind"],
            namespace,
            body=manifest,
            field_validation="Strict",
            **({"dry_run": "All"} if dry_run else {}),
        )
        return created

    def apply(
        self,
        manifest: dict[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
        field_manager: str = FIELD_MANAGER,
    ) -> dict[str, Any]:
        """Server-side apply (create or update), as `kubectl apply --server-side`; with
        `field_manager="helm"`, as Helm applies the chart's objects."""
        # The generated client drops the body of apply-patch responses; read it raw.
        response = self._call(
            "patch",
            manifest["kind"],
            namespace,
            name=manifest["metadata"]["name"],
            body=manifest,
            field_manager=field_manager,
            field_validation="Strict",
            force=True,
            _content_type=APPLY_PATCH,
            _preload_content=False,
            **({"dry_run": "All"} if dry_run else {}),
        )
        applied: dict[str, Any] = json_body(response)
        return applied

    def apply_platform_as_helm(self, **spec: Any) -> dict[str, Any]:
        """AgentPlatform/default (the release's: only Helm may change it) changed as Helm
        changes it, `spec` over its spec: a server-side apply of the whole object by the
        field manager "helm". A merge patch named "helm" is an Update, another field
        manager to the API server than Helm's own apply, and the chart's next `helm
        upgrade` then conflicts on the fields it set. The whole object, labels and
        annotations too: an apply by "helm" drops what Helm's apply owns and it leaves out."""
        platform = self.get("AgentPlatform", "default")
        meta = platform["metadata"]
        manifest = {
            "apiVersion": platform["apiVersion"],
            "kind": "AgentPlatform",
            "metadata": {
                "name": "default",
                "labels": meta.get("labels") or {},
                "annotations": meta.get("annotations") or {},
            },
            "spec": {**platform["spec"], **spec},
        }
        return self.apply(manifest, field_manager="helm")

    def patch(
        self,
        kind: str,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """A merge patch; `field_manager="helm"` for the chart's own objects, which only
        Helm may change (the platform-owner policy)."""
        patched: dict[str, Any] = self._call(
            "patch",
            kind,
            namespace,
            name=name,
            body=patch,
            field_validation="Strict",
            _content_type=MERGE_PATCH,
            **({"field_manager": field_manager} if field_manager else {}),
        )
        return patched

    def replace(
        self,
        manifest: dict[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """An update of the whole object; `field_manager="helm"` for the chart's own."""
        replaced: dict[str, Any] = self._call(
            "replace",
            manifest["kind"],
            namespace,
            name=manifest["metadata"]["name"],
            body=manifest,
            field_validation="Strict",
            **({"dry_run": "All"} if dry_run else {}),
            **({"field_manager": field_manager} if field_manager else {}),
        )
        return replaced

    def patch_status(
        self, kind: str, name: str, status: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        scope = "namespaced" if kind in NAMESPACED else "cluster"
        method = getattr(self.custom, f"patch_{scope}_custom_object_status")
        result: dict[str, Any] = method(
            **self._where(kind, namespace),
            name=name,
            body={"status": status},
            _content_type=MERGE_PATCH,
        )
        return result

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        found: dict[str, Any] = self._call("get", kind, namespace, name=name)
        return found

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            self._call("delete", kind, namespace, name=name)
        except ApiException as error:
            if error.status != 404:
                raise


def rejection(call: Callable[[], object]) -> tuple[int, str]:
    """Run a call the API server must refuse; its HTTP status and message."""
    try:
        call()
    except ApiException as error:
        return int(error.status or 0), message_of(error)
    raise AssertionError("the API server accepted a request it should have refused")


def message_of(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message", error.body))
    except ValueError:
        return str(error.body)


def verdict(call: Callable[[], object]) -> str | None:
    """None if the API server accepted the call, else its message."""
    try:
        call()
    except ApiException as error:
        if error.status in (400, 403, 422):
            return message_of(error)
        raise
    return None
