"""RBAC the local stack grants beyond the bootstrap policy: the API server's access to
the real kubelet, as kubeadm grants it."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

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
