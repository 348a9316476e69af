"""The operator's writes on its own custom resources and the Events it posts about them."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.resources.common import API_GROUP, API_VERSION, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT
from achilles.k8s.rest import (
    DEFAULT_TIMEOUT,
    MERGE_PATCH,
    CoreApi,
    each_metadata,
    list_or_watch,
    request_unread,
)

COMPONENT = "achilles-operator"


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    plural: str
    name: str
    namespace: str | None = None
    uid: str | None = None


class Resources:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = CoreApi(api)

    def patch_status(self, ref: ObjectRef, status: dict[str, Any]) -> bool:
        """Merge-patch `status`; False when the object is gone. The answer (the whole
        object) is not decoded: through the generated client the whole call (validating
        its arguments, the request, decoding that answer) was a third of an Agent's
        reconcile at a restart (a py-spy --gil profile of `achilles bench intake`), and
        no caller reads the answer."""
        scope = "" if ref.namespace is None else f"/namespaces/{ref.namespace}"
        path = f"/apis/{API_GROUP}/{API_VERSION_NAME}{scope}/{ref.plural}/{ref.name}/status"
        try:
            request_unread(
                self.api, "PATCH", path, body={"status": status}, content_type=MERGE_PATCH
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def read_object(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The object as the API server has it now; None when it is gone."""
        try:
            if ref.namespace is None:
                found = self.custom.get_cluster_custom_object(
                    API_GROUP, API_VERSION_NAME, ref.plural, ref.name
                )
            else:
                found = self.custom.get_namespaced_custom_object(
                    API_GROUP, API_VERSION_NAME, ref.namespace, ref.plural, ref.name
                )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        body = cast(dict[str, Any], found)
        if ref.uid is not None and body.get("metadata", {}).get("uid") != ref.uid:
            return None  # a new object of the same name: the one we knew is gone
        return body

    def patch_agent_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> bool:
        try:
            self.custom.patch_namespaced_custom_object(
                API_GROUP, API_VERSION_NAME, namespace, AGENT.plural, name, {"spec": spec}
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list_objects(
        self,
        plural: str,
        namespace: str,
        *,
        _preload_content: bool = True,
        _request_timeout: Any = DEFAULT_TIMEOUT,
        **query: Any,
    ) -> Any:
        """The list of a kind of ours (`plural`) in `namespace`, or in every namespace
        when it is "" (a cluster-scoped kind: always ""), as a dict; with
        `_preload_content=False`, the unread response (a watch's stream when
        `watch=True`): k8s/custom_watch.py's `ListWatch` takes it as a generated `list_*`."""
        scope = f"/namespaces/{namespace}" if namespace else ""
        path = f"/apis/{API_GROUP}/{API_VERSION_NAME}{scope}/{plural}"
        return list_or_watch(self.api, path, _preload_content, _request_timeout, query)

    def agent_uids(self) -> set[str] | None:
        """The uids of every Agent in the cluster (metadata only); None on failure."""
        return self._collect_metadata(AGENT.plural, "uid")

    def object_names(self, plural: str) -> set[str] | None:
        """The names of every object of a cluster-scoped kind of ours (metadata only);
        None on failure."""
        return self._collect_metadata(plural, "name")

    def _collect_metadata(self, plural: str, field: str) -> set[str] | None:
        """One metadata field of every object, all namespaces (without the metadata-only
        list every object comes whole, status and all); None on failure."""
        path = f"/apis/{API_GROUP}/{API_VERSION_NAME}/{plural}"
        try:
            return {str(meta[field]) for meta in each_metadata(self.api, path)}
        except ApiException:
            return None

    def post_event(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> None:
        """A core/v1 Event on the object, as `kubectl describe` shows them."""
        now = datetime.now(UTC)
        namespace = ref.namespace or "default"
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{ref.name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": ref.kind,
                "name": ref.name,
                **({"namespace": ref.namespace} if ref.namespace else {}),
                **({"uid": ref.uid} if ref.uid else {}),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "action": reason,
        }
        # An Event is a courtesy; losing one must not stop the operator.
        with contextlib.suppress(ApiException):
            self.core.create_namespaced_event(namespace, body)
