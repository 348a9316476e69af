"""What a run's pod or Job says about the run (DESIGN.md §4, "Reaping"), table-tested."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from achilles.domain.pod_outcome import (
    START_DEADLINE,
    ContainerObservation,
    JobObservation,
    PodObservation,
    job_verdict,
    may_fail,
    pod_verdict,
)

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _pod(
    phase: str,
    *,
    reason: str | None = None,
    message: str | None = None,
    age: timedelta = timedelta(seconds=5),
    unschedulable: str | None = None,
    **runner: object,
) -> PodObservation:
    return PodObservation(
        run_id=1,
        name="achilles-run-1-abcde",
        phase=phase,
        reason=reason,
        message=message,
        created_at=NOW - age,
        runner=ContainerObservation(**runner) if runner else None,  # type: ignore[arg-type]
        unschedulable_message=unschedulable,
    )


@pytest.mark.parametrize(
    ("pod", "words"),
    [
        (_pod("Failed", terminated_reason="OOMKilled", exit_code=137), "OOMKilled"),
        (_pod("Failed", terminated_reason="Error", exit_code=3), "exited with code 3"),
        (_pod("Failed", reason="Evicted", message="The node was low on memory."), "evicted"),
        (_pod("Failed", reason="DeadlineExceeded", message="Pod was active too long"), "deadline"),
        (_pod("Succeeded", terminated_reason="Completed", exit_code=0), "without recording"),
        (_pod("Pending", waiting_reason="InvalidImageName", waiting_message="bad"), "cannot start"),
        (
            _pod("Pending", age=START_DEADLINE * 2, waiting_reason="ImagePullBackOff"),
            "ImagePullBackOff",
        ),
        (
            _pod("Pending", age=START_DEADLINE * 2, unschedulable="0/1 nodes are available"),
            "could not be scheduled",
        ),
        (
            _pod(
                "Pending",
                age=START_DEADLINE * 2,
                waiting_reason="CreateContainerConfigError",
                waiting_message='secret "achilles-runner-database" not found',
            ),
            "did not start within 60 s: CreateContainerConfigError",
        ),
    ],
)
def test_pods_that_end_a_run(pod: PodObservation, words: str) -> None:
    verdict = pod_verdict(pod, NOW)
    assert verdict is not None
    assert words in verdict.error


@pytest.mark.parametrize(
    "pod",
    [
        _pod("Running"),
        _pod("Pending"),
        _pod("Pending", waiting_reason="ImagePullBackOff"),  # young: a registry hiccup
        _pod("Pending", waiting_reason="ContainerCreating"),
        _pod("Pending", unschedulable="0/1 nodes are available"),  # young: room may free up
        # young: the kubelet retries (a Secret cache not synced while the API server restarts)
        _pod(
            "Pending",
            waiting_reason="CreateContainerConfigError",
            waiting_message="failed to sync secret cache: timed out waiting for the condition",
        ),
    ],
)
def test_pods_that_leave_the_run_alone(pod: PodObservation) -> None:
    assert pod_verdict(pod, NOW) is None


def test_a_job_at_its_deadline_names_it() -> None:
    verdict = job_verdict(
        JobObservation(1, "achilles-run-1", "DeadlineExceeded", "Job was active longer", False, 60)
    )
    assert verdict is not None
    assert "active deadline (60 s" in verdict.error


def test_a_running_or_complete_job_says_nothing() -> None:
    assert job_verdict(JobObservation(1, "achilles-run-1", None, None, True, 60)) is None


def test_a_pod_waiting_for_its_run_secret_is_the_sweepers_not_the_start_deadlines() -> None:
    """Its dispatcher died between the Job and its Secret: the sweeper makes the Secret
    once an operator runs, however late; the Job's active deadline bounds the wait."""
    waiting = {
        "waiting_reason": "CreateContainerConfigError",
        "waiting_message": 'secret "achilles-run-1" not found',
    }
    for age in (START_DEADLINE * 2, START_DEADLINE * 100):
        pod = dataclasses.replace(_pod("Pending", age=age, **waiting), waiting_for_run_secret=True)
        assert pod_verdict(pod, NOW) is None
        assert not may_fail(pod)  # the pod watcher's folds skip it: no transaction
    # Any other Secret missing fails at the start deadline, as before.
    assert pod_verdict(_pod("Pending", age=START_DEADLINE * 2, **waiting), NOW) is not None
