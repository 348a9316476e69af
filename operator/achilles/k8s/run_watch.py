"""The watches of run pods and run Jobs (k8s/watching.py).

Only the fields a verdict needs are read from the API's JSON (k8s/run_observations.py's
`pod_from_json` and `job_from_json`); the rest of each object (the pod spec, the Job's
template) is never turned into objects.
"""

from __future__ import annotations

from achilles.domain.pod_outcome import JobObservation, PodObservation
from achilles.k8s.jobs import RunJobs
from achilles.k8s.run_metadata import RUN_SELECTOR
from achilles.k8s.run_observations import job_from_json, pod_from_json
from achilles.k8s.watching import ListWatch


def pod_watch(jobs: RunJobs, timeout_seconds: int) -> ListWatch[PodObservation]:
    return ListWatch(
        jobs.core.list_namespaced_pod,
        jobs.namespace,
        pod_from_json,
        label_selector=RUN_SELECTOR,
        timeout_seconds=timeout_seconds,
    )


def job_watch(jobs: RunJobs, timeout_seconds: int) -> ListWatch[JobObservation]:
    return ListWatch(
        jobs.batch.list_namespaced_job,
        jobs.namespace,
        job_from_json,
        label_selector=RUN_SELECTOR,
        timeout_seconds=timeout_seconds,
    )
