"""The core and batch groups' calls the operator makes, as JSON, on a kubernetes
`ApiClient`'s connection pool and credentials.

The generated `CoreV1Api` imports the model module of every core kind it names: about
240 modules, 14 MiB of the operator's RSS and 0.9 s of its start (`python -X importtime`),
for the few calls (list pods, read or create a Secret, post an Event) whose answers are
read as JSON anyway; `BatchV1Api` its batch kinds', 0.34 s of the start-up activity that
the listing of the Agents waits for, for five calls on Jobs. `CoreApi` and `BatchApi` keep
the generated method names and keywords, so k8s/watching.py's `ListWatch` takes their
`list_namespaced_*` as it takes a generated one; answers are dicts (or, with
`_preload_content=False`, the unread response).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.client import json_body

# The generated clients' keywords -> the API's query parameters.
_QUERY = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "limit": "limit",
    "_continue": "continue",
    "resource_version": "resourceVersion",
    "watch": "watch",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
}
DEFAULT_TIMEOUT = (10.0, 60.0)
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
# The API server answers a list with only each object's metadata.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
# A metadata list comes in pages of this many objects: one list of 10,000 Agents is
# parsed at once otherwise, beside kopf's listing of them at a start.
METADATA_PAGE = 500


def _query_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: dict[str, Any] | None = None,
    body: dict[str, Any] | None = None,
    timeout: Any = DEFAULT_TIMEOUT,
    accept: str = JSON,
    content_type: str = JSON,
) -> Any:
    """The unread response (urllib3's) to `method path`; `ApiException` for a status
    outside 2xx, as the generated clients raise it."""
    params = [
        (_QUERY[key], _query_value(value))
        for key, value in (query or {}).items()
        if value is not None
    ]
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=params,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*serialized, _request_timeout=timeout)
    if not 200 <= response.status <= 299:
        response.read()  # type: ignore[no-untyped-call]
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response


def request_json(api: client.ApiClient, method: str, path: str, **kwargs: Any) -> Any:
    """The decoded JSON answer to `method path` (see `request`)."""
    response = request(api, method, path, **kwargs)
    try:
        return json_body(response)
    finally:
        response.release_conn()


def request_unread(api: client.ApiClient, method: str, path: str, **kwargs: Any) -> None:
    """`method path` for its status alone (see `request`): the answer is read off the
    connection, for its reuse, and not decoded."""
    response = request(api, method, path, **kwargs)
    try:
        response.read()
    finally:
        response.release_conn()


def list_or_watch(
    api: client.ApiClient, path: str, preload: bool, timeout: Any, query: dict[str, Any]
) -> Any:
    """A generated `list_*` call's answer: the list as a dict, or with `preload` False
    (as `_preload_content=False`) the unread response, a watch's stream when `query`
    says `watch=True` (k8s/watching.py's `ListWatch` reads it so)."""
    if not preload:
        return request(api, "GET", path, query=query, timeout=timeout)
    return request_json(api, "GET", path, query=query, timeout=timeout)


def each_metadata(api: client.ApiClient, path: str, **query: Any) -> Iterator[dict[str, Any]]:
    """The metadata of each object the list at `path` holds, read in pages of
    METADATA_PAGE (`query`: the generated clients' keywords, e.g. `label_selector`) and
    given one page at a time: a caller that keeps a uid or a name of each holds one page,
    not every object's metadata (`managedFields` and all: at 60,000 Agents, 360 MiB of
    the operator's RSS, kept by the allocator after the listing)."""
    token: str | None = None
    while True:
        answer = request_json(
            api,
            "GET",
            path,
            query={**query, "limit": METADATA_PAGE, "_continue": token},
            accept=METADATA_LIST,
        )
        # A metadata list of no objects comes as `"items": null` (the API server's empty
        # slice): that is "none exist", not a failure.
        for item in answer.get("items") or []:
            yield item["metadata"]
        token = (answer.get("metadata") or {}).get("continue")
        if not token:
            return


class CoreApi:
    """`CoreV1Api`'s calls the operator makes, answered as JSON."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def list_namespaced_pod(
        self,
        namespace: str,
        *,
        _preload_content: bool = True,
        _request_timeout: Any = DEFAULT_TIMEOUT,
        **query: Any,
    ) -> Any:
        """The PodList as a dict; with `_preload_content=False`, the unread response (a
        watch's stream when `watch=True`)."""
        path = f"/api/v1/namespaces/{namespace}/pods"
        return list_or_watch(self.api, path, _preload_content, _request_timeout, query)

    def read_namespaced_secret(self, name: str, namespace: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        answer: dict[str, Any] = request_json(self.api, "GET", path)
        return answer

    def create_namespaced_secret(
        self, namespace: str, body: dict[str, Any], *, _request_timeout: Any = DEFAULT_TIMEOUT
    ) -> None:
        """Create a Secret; its answer (which holds the value) is read and dropped."""
        path = f"/api/v1/namespaces/{namespace}/secrets"
        request_unread(self.api, "POST", path, body=body, timeout=_request_timeout)

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> None:
        path = f"/api/v1/namespaces/{namespace}/events"
        request_json(self.api, "POST", path, body=body)


class BatchApi:
    """`BatchV1Api`'s calls the operator makes on Jobs, answered as JSON."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def list_namespaced_job(
        self,
        namespace: str,
        *,
        _preload_content: bool = True,
        _request_timeout: Any = DEFAULT_TIMEOUT,
        **query: Any,
    ) -> Any:
        """The JobList as a dict; with `_preload_content=False`, the unread response (a
        watch's stream when `watch=True`)."""
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        return list_or_watch(self.api, path, _preload_content, _request_timeout, query)

    def create_namespaced_job(
        self, namespace: str, body: dict[str, Any], *, _request_timeout: Any = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        """The Job as made (its uid is the caller's)."""
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        made: dict[str, Any] = request_json(
            self.api, "POST", path, body=body, timeout=_request_timeout
        )
        return made

    def read_namespaced_job(
        self, name: str, namespace: str, *, _request_timeout: Any = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"
        found: dict[str, Any] = request_json(self.api, "GET", path, timeout=_request_timeout)
        return found

    def delete_namespaced_job(
        self, name: str, namespace: str, *, propagation_policy: str = "Background"
    ) -> None:
        """Delete the Job; `propagation_policy` says what becomes of its pods (the API's
        own default for a Job is to orphan them: no caller wants that)."""
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"
        options = {"kind": "DeleteOptions", "propagationPolicy": propagation_policy}
        request_unread(self.api, "DELETE", path, body={"apiVersion": "v1", **options})
