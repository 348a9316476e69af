"""Request a run of an agent the Kubernetes way: a new `achilles.io/run-requested-at` value.

Writing it is a merge patch of the annotation alone, so nothing else on the resource
is touched. Honouring it is the operator's (`achilles.services.agent_events`); writers go through
`achilles.services.run_requests.RunRequester`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from achilles.k8s.agent_spec import merge_patch_agent
from achilles.k8s.annotations import CANCEL_RUN, RUN_REQUESTED_AT, format_run_request

__all__ = ["CANCEL_RUN", "RUN_REQUESTED_AT", "request_cancel", "request_run"]


def request_run(namespace: str, name: str, at: datetime, *, kubeconfig: Path | None = None) -> str:
    """Annotate Agent `namespace/name` with a run request at `at`; return the value written.

    Raises `NotFound` when the Agent does not exist and `ClusterUnavailable`
    when no cluster is configured, reachable, or willing.
    """
    value = format_run_request(at)
    body = {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}
    merge_patch_agent(namespace, name, body, doing="annotate", kubeconfig=kubeconfig)
    return value


def request_cancel(
    namespace: str, name: str, run_id: int, *, kubeconfig: Path | None = None
) -> str:
    """Annotate Agent `namespace/name` with a request to cancel its run `run_id`
    (`achilles.io/cancel-run`); return the value written. Errors as `request_run`."""
    value = str(run_id)
    body = {"metadata": {"annotations": {CANCEL_RUN: value}}}
    merge_patch_agent(namespace, name, body, doing="annotate", kubeconfig=kubeconfig)
    return value
