"""RBAC for the kubelet stand-in's own identity.

The stand-in is not a real node identity (`system:node:*` would put it under the Node
authorizer and NodeRestriction admission, which forbid binding pods), so it gets a
ClusterRole with exactly what it does: manage its Node, bind, watch and report on
pods, finish their deletion, and read the Secrets and ConfigMaps their env refers to.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles_dev.pki import KUBELET_USER

ROLE_NAME = "achilles:kubelet-standin"

_RULES = [
    ("", ["nodes"], ["get", "list", "watch", "create", "update", "patch"]),
    ("", ["nodes/status"], ["get", "update", "patch"]),
    ("", ["pods"], ["get", "list", "watch", "delete"]),
    ("", ["pods/status"], ["get", "update", "patch"]),
    ("", ["pods/binding", "bindings"], ["create"]),
    ("", ["secrets", "configmaps"], ["get"]),
    ("", ["events"], ["create", "patch", "update"]),
    ("events.k8s.io", ["events"], ["create", "patch", "update"]),
]


def ensure_kubelet_rbac(api_client: client.ApiClient) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    role = client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=ROLE_NAME),
        rules=[
            client.V1PolicyRule(api_groups=[group], resources=resources, verbs=verbs)
            for group, resources, verbs in _RULES
        ],
    )
    binding = client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=ROLE_NAME),
        role_ref=client.V1RoleRef(
            api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=ROLE_NAME
        ),
        subjects=[
            client.RbacV1Subject(
                api_group="rbac.authorization.k8s.io", kind="User", name=KUBELET_USER
            )
        ],
    )
    try:
        rbac.create_cluster_role(role)
    except ApiException as error:
        if error.status != 409:
            raise
        rbac.replace_cluster_role(ROLE_NAME, role)
    try:
        rbac.create_cluster_role_binding(binding)
    except ApiException as error:
        if error.status != 409:
            raise


APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"
_KUBELET_API_BINDING = "achilles:apiserver-kubelet-api-admin"


def ensure_apiserver_kubelet_rbac(api_client: client.ApiClient) -> None:
    """Let the API server into a real kubelet (logs, exec), as kubeadm does.

    The kubelet authorises its clients with SubjectAccessReviews, and the API server
    calls it as `kube-apiserver-kubelet-client` (its client certificate's name).
    """
    binding = client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=_KUBELET_API_BINDING),
        role_ref=client.V1RoleRef(
            api_group="rbac.authorization.k8s.io",
            kind="ClusterRole",
            name="system:kubelet-api-admin",
        ),
        subjects=[
            client.RbacV1Subject(
                api_group="rbac.authorization.k8s.io", kind="User", name=APISERVER_KUBELET_CLIENT
            )
        ],
    )
    try:
        client.RbacAuthorizationV1Api(api_client).create_cluster_role_binding(binding)
    except ApiException as error:
        if error.status != 409:
            raise
