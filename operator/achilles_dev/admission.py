"""Wait until the chart's admission policies judge: what every chart install ends with.

Kept apart from `chart.py` (Helm itself) because the fault suite also waits here after
restarting the API server, without installing anything.
"""

from __future__ import annotations

from pathlib import Path

from achilles.errors import LocalStackError

# What the API server answers for a ValidatingAdmissionPolicy with a paramKind that cannot
# judge yet: before its informer for the parameters synced (after every API server start),
# and after a restart until it found the paramKind's CRD again.
POLICY_NOT_SYNCED = ("not yet synced", "failed to find resource referenced by paramKind")
_POLICY_SYNC_TIMEOUT = 120.0


def wait_until_policies_admit(kubeconfig: Path, *, timeout: float = _POLICY_SYNC_TIMEOUT) -> None:
    """Return once the chart's single-default-model policy judges AgentModels.

    Until its parameters (the AgentModels themselves) have synced, that policy refuses
    every AgentModel ("paramKind kind AgentModel not yet synced"): after a fresh install
    and after each API server start, e.g. for ~45 s after `achilles dev down && dev up`.
    Everything that installs the chart and then applies models (`dev up` + the demo, the
    install tests, the fault suite, the benchmarks) waits here, with a server-side dry run
    of a model that is not the default (so an existing default never refuses it).
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from achilles.k8s.client import api_client
    from achilles_dev.waiting import wait_until

    probe = {
        "apiVersion": "achilles.io/v1alpha1",
        "kind": "AgentModel",
        "metadata": {"name": "achilles-policy-probe"},
        "spec": {"baseURL": "http://127.0.0.1:9/v1", "model": "probe", "default": False},
    }
    with api_client(kubeconfig) as api:
        custom = client.CustomObjectsApi(api)

        def admits() -> bool:
            try:
                custom.create_cluster_custom_object(
                    "achilles.io", "v1alpha1", "agentmodels", probe, dry_run="All"
                )
            except ApiException as error:
                if error.status == 409:  # a model of that name exists: admission passed
                    return True
                said = str(error.body)
                if any(words in said for words in POLICY_NOT_SYNCED):
                    return False
                raise LocalStackError(
                    f"the API server refused a probe AgentModel: {error.reason}: {said}"
                ) from error
            return True

        wait_until(
            admits,
            timeout=timeout,
            what="the single-default-model admission policy to sync its AgentModels",
            interval=0.5,
        )
