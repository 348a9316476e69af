"""The handful of API calls the stand-in makes, over the official Python client.

Pods are handled as plain JSON dicts (camelCase, as the API serves them) so the pure
parts of the stand-in (environment, status) read like the Kubernetes documentation.
Status goes up as a JSON merge patch: lists such as `containerStatuses` are replaced
whole and no resourceVersion is needed, so the Job controller removing its finalizer
at the same moment never makes our update conflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.client import json_body, to_dict
from achilles_dev.kubelet.environment import decode_secret
from achilles_dev.kubelet.node import node_manifest, node_status

Pod = dict[str, Any]
_MERGE_PATCH = "application/merge-patch+json"


class PodApi:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)

    def to_dict(self, obj: Any) -> dict[str, Any]:
        return to_dict(self._api_client, obj)

    def read_pod(self, namespace: str, name: str) -> Pod:
        response = self._core.read_namespaced_pod(name, namespace, _preload_content=False)
        pod: Pod = json_body(response)
        return pod

    def bind(self, pod: Pod, node: str) -> bool:
        """Bind an unscheduled pod to `node`; False if someone else bound or deleted it first."""
        metadata = pod["metadata"]
        binding = client.V1Binding(
            metadata=client.V1ObjectMeta(name=metadata["name"], uid=metadata["uid"]),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            self._core.create_namespaced_pod_binding(
                metadata["name"], metadata["namespace"], binding, _preload_content=False
            )
        except ApiException as error:
            if error.status in (404, 409):
                return False
            raise
        return True

    def patch_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        metadata = pod["metadata"]
        try:
            self._core.patch_namespaced_pod_status(
                metadata["name"],
                metadata["namespace"],
                {"metadata": {"uid": metadata["uid"]}, "status": dict(status)},
                _content_type=_MERGE_PATCH,
                _preload_content=False,
            )
        except ApiException as error:
            if error.status not in (404, 409):  # gone, or a new pod under the same name
                raise

    def finish_deletion(self, pod: Pod) -> None:
        """The kubelet's last word on a gracefully deleted pod: delete it with grace 0."""
        metadata = pod["metadata"]
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=metadata["uid"])
        )
        try:
            self._core.delete_namespaced_pod(
                metadata["name"], metadata["namespace"], body=options, _preload_content=False
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            if kind == "secret":
                secret = self._core.read_namespaced_secret(name, namespace, _preload_content=False)
                return decode_secret(json_body(secret).get("data"))
            config_map = self._core.read_namespaced_config_map(
                name, namespace, _preload_content=False
            )
            return dict(json_body(config_map).get("data") or {})
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def register_node(self, name: str, max_pods: int, endpoint_port: int) -> None:
        try:
            self._core.create_node(
                client.V1Node.model_validate(node_manifest(name)), _preload_content=False
            )
        except ApiException as error:
            if error.status != 409:
                raise
        self.heartbeat(name, max_pods, endpoint_port)
        # Lift the taints TaintNodesByCondition put on the node while it was not Ready yet.
        self._core.patch_node(
            name, {"spec": {"taints": None}}, _content_type=_MERGE_PATCH, _preload_content=False
        )

    def heartbeat(self, name: str, max_pods: int, endpoint_port: int) -> None:
        self._core.patch_node_status(
            name,
            {"status": node_status(max_pods, endpoint_port)},
            _content_type=_MERGE_PATCH,
            _preload_content=False,
        )
