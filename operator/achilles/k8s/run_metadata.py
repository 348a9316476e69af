"""How a run's Job and pods are named and labelled: the contract between the Job the
dispatcher makes (k8s/jobs.py), the watches that select it (k8s/run_watch.py) and the
readers that tie an object back to its run (k8s/run_observations.py).

A module of its own so that the builder and the readers share it without importing each
other (the Job calls list a run's pods through the readers). No API client here.
"""

from __future__ import annotations

from achilles.k8s.resources.common import API_GROUP

JOB_NAME_PREFIX = "achilles-run-"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "achilles-operator"
RUN_ID_LABEL = f"{API_GROUP}/run-id"
AGENT_ID_LABEL = f"{API_GROUP}/agent-id"
AGENT_UID_LABEL = f"{API_GROUP}/agent-uid"
TRIGGER_LABEL = f"{API_GROUP}/trigger"
AGENT_ANNOTATION = f"{API_GROUP}/agent"
SLOT_ANNOTATION = f"{API_GROUP}/scheduled-for"
# The SHA-256 (hex) of the run secret the Job's pod reads from its run Secret: what a
# later dispatch that finds the Job already there stores in the run's row, without
# reading the Secret (the operator may create Secrets in the runs namespace, not read
# them). A hash of 32 random bytes, as the row holds it: it opens nothing.
RUN_SECRET_DIGEST_ANNOTATION = f"{API_GROUP}/run-secret-sha256"
# The key of the run's Secret (named like its Job) that holds the run secret.
RUN_SECRET_KEY = "run-secret"  # noqa: S105 - a key's name
RUNNER_CONTAINER = "runner"
RUN_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


def job_name(run_id: int) -> str:
    return f"{JOB_NAME_PREFIX}{run_id}"


def run_secret_name(run_id: int) -> str:
    """The run's Secret, owned by its Job: named like it (another kind)."""
    return job_name(run_id)


def run_id_of(name: str) -> int | None:
    suffix = name.removeprefix(JOB_NAME_PREFIX)
    return int(suffix) if suffix != name and suffix.isdigit() else None
