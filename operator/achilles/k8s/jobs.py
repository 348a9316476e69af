"""Run Jobs: the pure manifest builder and the few API calls the operator makes on
them and their pods.

DESIGN.md §4: one Job per run, named from the run id (a retry finds its Job instead of
making a second), `backoffLimit: 0`, an active deadline from `runTimeoutSeconds`, a
TTL after it finishes, no service-account token, the restricted security context,
labels linking it to its agent and run (their names: k8s/run_metadata.py). The operator
watches only what carries `MANAGED_BY_LABEL` in the runs namespace (k8s/run_watch.py);
what it reads of a run's Job and pods is k8s/run_observations.py.

The run secret (domain/run_secret.py) is never in the Job: its pod reads it from the
run's Secret (`secretKeyRef`), which the operator makes right after the Job, owned by
it, so the garbage collector deletes it with the Job. `get` on Jobs and pods (the
built-in `view` role) shows no secret; the Job carries only its SHA-256, as the run's
row does (issue 37, item 2; docs/security.md).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3 import HTTPResponse
from urllib3.exceptions import ConnectTimeoutError, HTTPError, MaxRetryError

from achilles.domain.pod_outcome import PodObservation
from achilles.domain.run_secret import RUN_SECRET_ENV, RunSecret
from achilles.domain.timestamps import iso_utc
from achilles.domain.trace_context import TRACEPARENT_ENV
from achilles.k8s.rest import CoreApi, each_metadata
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


def build_run_secret(
    run_id: int, namespace: str, secret: RunSecret, job_uid: str
) -> dict[str, Any]:
    """The run's Secret, as the API's JSON: owned by its Job (uid `job_uid`), so the
    garbage collector deletes it with the Job; immutable (the kubelet then does not
    watch it, and nothing may change what the pod read)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": run_secret_name(run_id),
            "namespace": namespace,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                "app.kubernetes.io/name": "achilles",
                "app.kubernetes.io/component": "run",
                RUN_ID_LABEL: str(run_id),
            },
            # Not blockOwnerDeletion: a Job deleted in the foreground (a cancel) waits
            # for its pods only.
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_name(run_id),
                    "uid": job_uid,
                }
            ],
        },
        "type": "Opaque",
        "immutable": True,
        "data": {RUN_SECRET_KEY: base64.b64encode(secret.value.encode()).decode()},
    }


# A Job create gives up after this (connect, read) in seconds: the dispatcher bounds how
# long after it marked a run the run's Job can still appear (services/dispatch.py).
CREATE_TIMEOUT = (3.0, 10.0)


class JobRejected(Exception):
    """The API server refused a Job (quota, admission, overload); retry later.

    `maybe_created`: the call failed after the request may have reached the API server
    (a read timeout, a dropped connection, a server-side timeout), so the Job may exist."""

    def __init__(self, status: int | None, message: str, *, maybe_created: bool = False) -> None:
        self.status = status
        self.maybe_created = maybe_created
        super().__init__(message)


def _rejected(exc: ApiException) -> JobRejected:
    # 500 and 504 may come after the write reached storage (the API server's own
    # timeouts); a 0 is the client's TLS failure, phase unknown. Other statuses refuse.
    return JobRejected(
        exc.status,
        f"{exc.status} {exc.reason}: {_body_message(exc)}",
        maybe_created=exc.status in (0, 500, 504),
    )


def _not_sent(exc: Exception) -> bool:
    """The request never reached the API server: no connection was made."""
    reason = exc.reason if isinstance(exc, MaxRetryError) else exc
    return isinstance(reason, (ConnectTimeoutError, ConnectionRefusedError))


class RunJobs:
    """The operator's calls on run Jobs and pods, in the runs namespace only."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.batch = client.BatchV1Api(api)
        self.core = CoreApi(api)

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
            made = self._create_secret(build_run_secret(run_id, self.namespace, secret, uid))
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
            # The client serialises plain dicts as they are (the API's JSON).
            # The raw urllib3 response, whatever the client's annotation says.
            response: HTTPResponse = cast(
                HTTPResponse,
                self.batch.create_namespaced_job(
                    self.namespace,
                    cast(Any, manifest),
                    _preload_content=False,
                    _request_timeout=CREATE_TIMEOUT,
                ),
            )
            body = response.read()
            response.release_conn()
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise _rejected(exc) from exc
        except (HTTPError, OSError) as exc:
            raise JobRejected(None, str(exc), maybe_created=not _not_sent(exc)) from exc
        return str(json.loads(body)["metadata"]["uid"])

    def _create_secret(self, manifest: dict[str, Any]) -> bool:
        """True when made now, False when one of its name exists (409). Its answer, which
        holds the value, is dropped unread; no error text carries the request."""
        try:
            self.core.create_namespaced_secret(
                self.namespace, manifest, _request_timeout=CREATE_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise _rejected(exc) from exc
        except (HTTPError, OSError) as exc:
            raise JobRejected(None, str(exc), maybe_created=not _not_sent(exc)) from exc
        return True

    def give_run_secret(self, run_id: int, secret: RunSecret) -> bool:
        """Make the run Secret of an existing Job whose pod waits for it (its dispatcher
        died between the two creates, or could not make it). False when the Job is gone
        or a Secret of that name exists; raises `JobRejected` as `create` does."""
        try:
            job = self.batch.read_namespaced_job(
                job_name(run_id), self.namespace, _request_timeout=CREATE_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _rejected(exc) from exc
        except (HTTPError, OSError) as exc:
            raise JobRejected(None, str(exc)) from exc
        uid = job.metadata.uid if job.metadata else None
        if not uid:
            return False
        return self._create_secret(build_run_secret(run_id, self.namespace, secret, uid))

    def run_secret_digest(self, run_id: int) -> bytes | None:
        """The SHA-256 of the run secret the run's existing Job's pod reads (None: no Job,
        or a Job without one), from the Job's annotation: the Secret is not read.

        A Job made by a dispatch whose mark is gone (undone, or released by the sweeper)
        is found by the next dispatch (AlreadyExists), which stores this hash in the row,
        so that its pod can claim."""
        try:
            job = self.batch.read_namespaced_job(
                job_name(run_id), self.namespace, _request_timeout=CREATE_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _rejected(exc) from exc
        except (HTTPError, OSError) as exc:
            raise JobRejected(None, str(exc)) from exc
        annotations = (job.metadata.annotations if job.metadata else None) or {}
        digest = annotations.get(RUN_SECRET_DIGEST_ANNOTATION)
        try:
            return bytes.fromhex(digest) if digest else None
        except ValueError:
            return None

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
                self.batch.api_client,
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


def _body_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message", exc.body))
    except ValueError:
        return str(exc.body)
