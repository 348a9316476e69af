"""A run's Job exists, if it ever will, before the sweeper may call it missing.

The dispatcher marks a run, then starts its create no later than `CREATE_DEADLINE`
after its pass began, and the create gives up after `CREATE_TIMEOUT` (connect, read);
the sweeper requeues a marked run without a Job only `MISSING_JOB_GRACE` after the
mark. Were the grace the shorter, a Job made late could find its row released, and its
pod would be refused its claim (services/dispatch.py)."""

from __future__ import annotations

from achilles.k8s.jobs import CREATE_TIMEOUT
from achilles.services.dispatch import CREATE_DEADLINE
from achilles.services.outcomes import MISSING_JOB_GRACE


def test_the_latest_create_ends_well_inside_the_sweepers_grace() -> None:
    latest = CREATE_DEADLINE + sum(CREATE_TIMEOUT)
    assert latest + 5 <= MISSING_JOB_GRACE.total_seconds()
