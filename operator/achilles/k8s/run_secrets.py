"""A run's Secret: the run secret (domain/run_secret.py) its pod reads (`secretKeyRef`),
never in the Job. The operator makes it right after the run's Job, owned by it, so the
garbage collector deletes it with the Job (`RunJobs.create`, k8s/jobs.py); the sweeper
gives one to a Job whose pod still waits for it (`give`). `get` on Jobs and pods (the
built-in `view` role) shows no secret; the Job carries only its SHA-256, as the run's
row does (issue 37, item 2; docs/security.md), and `digest` reads it there.
"""

from __future__ import annotations

import base64
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from achilles.domain.run_secret import RunSecret
from achilles.k8s.refusals import CREATE_TIMEOUT, JobRejected, not_sent, rejected
from achilles.k8s.rest import BatchApi, CoreApi
from achilles.k8s.run_metadata import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RUN_ID_LABEL,
    RUN_SECRET_DIGEST_ANNOTATION,
    RUN_SECRET_KEY,
    job_name,
    run_secret_name,
)


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


class RunSecrets:
    """The operator's calls on run Secrets (and on the Job a Secret belongs to), in the
    runs namespace only."""

    def __init__(self, batch: BatchApi, core: CoreApi, namespace: str) -> None:
        self.batch = batch
        self.core = core
        self.namespace = namespace

    def create(self, run_id: int, secret: RunSecret, job_uid: str) -> bool:
        """Make the run's Secret, owned by its Job (uid `job_uid`). True when made now,
        False when one of its name exists (409). Its answer, which holds the value, is
        dropped unread; no error text carries the request."""
        manifest = build_run_secret(run_id, self.namespace, secret, job_uid)
        try:
            self.core.create_namespaced_secret(
                self.namespace, manifest, _request_timeout=CREATE_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise rejected(exc) from exc
        except (HTTPError, OSError) as exc:
            raise JobRejected(None, str(exc), maybe_created=not not_sent(exc)) from exc
        return True

    def give(self, run_id: int, secret: RunSecret) -> bool:
        """Make the run Secret of an existing Job whose pod waits for it (its dispatcher
        died between the two creates, or could not make it). False when the Job is gone
        or a Secret of that name exists; raises `JobRejected` as `RunJobs.create` does."""
        job = self._job(run_id)
        if job is None:
            return False
        uid = (job.get("metadata") or {}).get("uid")
        if not uid:
            return False
        return self.create(run_id, secret, uid)

    def _job(self, run_id: int) -> dict[str, Any] | None:
        """The run's Job (None: there is none); raises `JobRejected` as `create` does."""
        try:
            return self.batch.read_namespaced_job(
                job_name(run_id), self.namespace, _request_timeout=CREATE_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise rejected(exc) from exc
        except (HTTPError, OSError) as exc:
            raise JobRejected(None, str(exc)) from exc

    def digest(self, run_id: int) -> bytes | None:
        """The SHA-256 of the run secret the run's existing Job's pod reads (None: no Job,
        or a Job without one), from the Job's annotation: the Secret is not read.

        A Job made by a dispatch whose mark is gone (undone, or released by the sweeper)
        is found by the next dispatch (AlreadyExists), which stores this hash in the row,
        so that its pod can claim."""
        job = self._job(run_id)
        if job is None:
            return None
        annotations = (job.get("metadata") or {}).get("annotations") or {}
        found = annotations.get(RUN_SECRET_DIGEST_ANNOTATION)
        try:
            return bytes.fromhex(found) if found else None
        except ValueError:
            return None
