"""Run Jobs: the pure manifest builder and the few API calls the operator makes on
them and their pods.

DESIGN.md §4: one Job per run, named from the run id (a retry finds its Job instead of
making a second), `backoffLimit: 0`, an active deadline from `runTimeoutSeconds`, a
TTL after it finishes, no service-account token, the restricted security context,
labels linking it to its agent and run (their names: k8s/run_metadata.py). The operator
watches only what carries `MANAGED_BY_LABEL` in the runs namespace (k8s/run_watch.py);
what it reads of a run's Job and pods is k8s/run_observations.py.

The run secret (domain/run_secret.py) is never in the Job: its pod reads it from the
run's Secret, which `RunJobs.create` makes right after the Job (k8s/run_secrets.py).
What a refused or failed create says is k8s/refusals.py's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from achilles.domain.pod_outcome import PodObservation
from achilles.domain.run_secret import RUN_SECRET_ENV, RunSecret
from achilles.domain.timestamps import iso_utc
from achilles.domain.trace_context import TRACEPARENT_ENV

# CREATE_TIMEOUT and JobRejected re-exported: the dispatcher and the sweeper name them here.
from achilles.k8s.refusals import CREATE_TIMEOUT as CREATE_TIMEOUT
from achilles.k8s.refusals import JobRejected as JobRejected
from achilles.k8s.refusals import not_sent, rejected
from achilles.k8s.rest import BatchApi, CoreApi, each_metadata
from achilles.k8s.run_metadata import (
    AGENT_ANNOTATION,
    AGENT_ID_LABEL,
    AGENT_UID_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RUN_ID_LABEL,
    RUN_SECRET_DIGEST_ANNOTATION,
    RUN_SECRET_KEY,
    RUN_SELECTOR,
    RUNNER_CONTAINER,
    SLOT_ANNOTATION,
    TRIGGER_LABEL,
    job_name,
    run_id_of,
    run_secret_name,
)
from achilles.k8s.run_observations import pod_from_json
from achilles.k8s.run_secrets import RunSecrets

# Agents whose Jobs one list selects (`agent-id in (...)`): a query string of ~1 KB.
AGENTS_PER_LIST = 100


@dataclass(frozen=True)
class SecretKey:
    name: str
    key: str


@dataclass(frozen=True)
class JobTemplate:
    """Installation-wide settings of run Jobs (the chart's values, via the environment)."""

    namespace: str
    image: str
    database_secret: SecretKey
    command: tuple[str, ...] = ("achilles", "runner")
    image_pull_policy: str = "IfNotPresent"
    ttl_seconds_after_finished: int = 3600
    resources: dict[str, dict[str, str]] = field(default_factory=dict)
    extra_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RunJobSpec:
    run_id: int
    agent_id: int
    agent_uid: str | None
    agent_namespace: str | None
    agent_name: str | None
    trigger: str
    scheduled_for: datetime | None
    run_timeout_seconds: int
    model_secret: SecretKey | None
    # What lets the runner's shared login act for this run only (domain/run_secret.py):
    # the pod reads it from the run's Secret; the Job carries only its hash.
    run_secret: RunSecret | None = None
    # The W3C traceparent of the run's dispatch span (tracing on): the runner's trace
    # continues it (the OpenTelemetry convention for a context in the environment).
    traceparent: str | None = None
    # Variables from Secrets' keys (the agent's MCP credentials, issue 38): by reference,
    # optional (a Secret missing makes the tool's calls fail, not the pod's start).
    secret_env: tuple[tuple[str, SecretKey], ...] = ()


def _label_safe(value: str | None) -> str:
    return "" if value is None else value[:63]


def build_run_job(run: RunJobSpec, template: JobTemplate) -> dict[str, Any]:
    """The Job of one run, as the API's JSON."""
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/name": "achilles",
        "app.kubernetes.io/component": "run",
        RUN_ID_LABEL: str(run.run_id),
        AGENT_ID_LABEL: str(run.agent_id),
        TRIGGER_LABEL: run.trigger,
    }
    if run.agent_uid:
        labels[AGENT_UID_LABEL] = _label_safe(run.agent_uid)
    annotations = {}
    if run.agent_namespace and run.agent_name:
        annotations[AGENT_ANNOTATION] = f"{run.agent_namespace}/{run.agent_name}"
    if run.scheduled_for is not None:
        annotations[SLOT_ANNOTATION] = iso_utc(run.scheduled_for)
    env: list[dict[str, Any]] = [
        {
            "name": "ACHILLES_DATABASE_URL",
            "valueFrom": {
                "secretKeyRef": {
                    "name": template.database_secret.name,
                    "key": template.database_secret.key,
                }
            },
        }
    ]
    job_annotations = dict(annotations)
    if run.run_secret is not None:
        # Never the value: a missing Secret holds the pod in CreateContainerConfigError
        # until the operator makes it, a moment after the Job.
        env.append(
            {
                "name": RUN_SECRET_ENV,
                "valueFrom": {
                    "secretKeyRef": {"name": run_secret_name(run.run_id), "key": RUN_SECRET_KEY}
                },
            }
        )
        job_annotations[RUN_SECRET_DIGEST_ANNOTATION] = run.run_secret.digest.hex()
    if run.model_secret is not None:
        env.append(
            {
                "name": "ACHILLES_MODEL_API_KEY",
                "valueFrom": {
                    "secretKeyRef": {"name": run.model_secret.name, "key": run.model_secret.key}
                },
            }
        )
    env += [
        {
            "name": name,
            "valueFrom": {
                "secretKeyRef": {"name": secret.name, "key": secret.key, "optional": True}
            },
        }
        for name, secret in run.secret_env
    ]
    env += [{"name": name, "value": value} for name, value in template.extra_env]
    if run.traceparent is not None:
        env.append({"name": TRACEPARENT_ENV, "value": run.traceparent})
    container: dict[str, Any] = {
        "name": RUNNER_CONTAINER,
        "image": template.image,
        "imagePullPolicy": template.image_pull_policy,
        "command": list(template.command),
        "args": ["--run-id", str(run.run_id)],
        "env": env,
        "securityContext": {
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],  # noqa: S108 - the pod's own
    }
    if template.resources:
        container["resources"] = template.resources
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(run.run_id),
            "namespace": template.namespace,
            "labels": labels,
            "annotations": job_annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": run.run_timeout_seconds,
            "ttlSecondsAfterFinished": template.ttl_seconds_after_finished,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "runAsGroup": 10001,
                        "fsGroup": 10001,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }


class RunJobs:
    """The operator's calls on run Jobs and pods, in the runs namespace only."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.batch = BatchApi(api)
        self.core = CoreApi(api)
        self.secrets = RunSecrets(self.batch, self.core, namespace)

    def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
        """Make the run's Job, then its run Secret owned by it. True when made now,
        False when the Job already existed (an earlier dispatch's, with its own Secret).

        The Job first: the Secret needs its uid, and a Secret made first would outlive a
        Job never made. Its pod waits for the Secret (`CreateContainerConfigError`, the
        kubelet retries) and starts once it exists. A Secret refused for sure deletes
        the Job and raises a refusal (the run's mark is undone, nothing is left); a
        Secret maybe made, or a Job that could not be deleted, raises `maybe_created`:
        the mark stays, and a Job whose pod still waits for its Secret after
        `RUN_SECRET_GRACE` gets one from the sweeper (`services/outcomes.py`), as one
        whose operator died between the two calls does."""
        uid = self._create_job(manifest)
        if uid is None:
            return False
        run_id = run_id_of(manifest["metadata"]["name"])
        assert run_id is not None, "a run Job is named from its run"
        try:
            made = self.secrets.create(run_id, secret, uid)
            if made:
                return True
            # A Secret of that name is there already: an earlier Job's, which the garbage
            # collector has not deleted yet. Its value is not this dispatch's: try again.
            refusal = JobRejected(409, f"Secret {run_secret_name(run_id)} already exists")
        except JobRejected as exc:
            if exc.maybe_created:
                raise
            refusal = exc
        try:
            self.delete(run_id)
        except (ApiException, HTTPError, OSError) as exc:
            raise JobRejected(
                refusal.status,
                f"{refusal}; its Job is left waiting for it ({exc})",
                maybe_created=True,
            ) from exc
        raise refusal

    def _create_job(self, manifest: dict[str, Any]) -> str | None:
        """The new Job's uid; None when it already existed (409).

        The answer is read as JSON, not parsed into the client's models: that costs ~3 ms
        of CPU under the GIL per Job, 3 s of a 1,000-Job burst."""
        try:
            made = self.batch.create_namespaced_job(
                self.namespace, manifest, _request_timeout=CREATE_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise rejected(exc) from exc
        except (HTTPError, OSError) as exc:
            raise JobRejected(None, str(exc), maybe_created=not not_sent(exc)) from exc
        return str(made["metadata"]["uid"])

    def give_run_secret(self, run_id: int, secret: RunSecret) -> bool:
        """Make the run Secret of an existing Job whose pod waits for it
        (`RunSecrets.give`)."""
        return self.secrets.give(run_id, secret)

    def run_secret_digest(self, run_id: int) -> bytes | None:
        """The SHA-256 of the run secret the run's existing Job's pod reads
        (`RunSecrets.digest`)."""
        return self.secrets.digest(run_id)

    def delete(self, run_id: int, *, foreground: bool = False) -> bool:
        """Delete the run's Job and its pods (a reaped or removed run); False if absent.
        `foreground`: the Job goes only after its pods are gone (a cancelled run, which
        holds its agent until then: the Job's deletion says the pod is gone)."""
        try:
            self.batch.delete_namespaced_job(
                job_name(run_id),
                self.namespace,
                propagation_policy="Foreground" if foreground else "Background",
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_for_agents(self, agent_ids: Collection[int]) -> int:
        """Delete every Job of these agents (they are gone): one metadata list for up to
        AGENTS_PER_LIST of them, then each Job by name. The number deleted."""
        ids = sorted(agent_ids)
        deleted = 0
        for start in range(0, len(ids), AGENTS_PER_LIST):
            some = ",".join(str(agent_id) for agent_id in ids[start : start + AGENTS_PER_LIST])
            jobs = each_metadata(
                self.api,
                f"/apis/batch/v1/namespaces/{self.namespace}/jobs",
                label_selector=f"{RUN_SELECTOR},{AGENT_ID_LABEL} in ({some})",
            )
            for job in jobs:
                try:
                    self.batch.delete_namespaced_job(
                        job["name"], self.namespace, propagation_policy="Background"
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                else:
                    deleted += 1
        return deleted

    def list_pods(self, run_id: int) -> list[PodObservation]:
        """The pods of one run (a failed Job's fold asks them why it failed)."""
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{RUN_SELECTOR},{RUN_ID_LABEL}={run_id}"
        )
        items = pods.get("items") or []
        return [obs for pod in items if (obs := pod_from_json(pod)) is not None]
