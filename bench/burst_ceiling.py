"""The API server's own ceiling for `achilles bench burst-vs-cronjob` (issue 20): the same N
run Jobs (the operator's manifests) created straight from the benchmark's process,
`PARALLEL_CREATES` at a time with the operator's create call (each Job, then its run
Secret), with no operator running.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from achilles.domain.run_secret import RunSecret
from achilles.k8s.jobs import JobTemplate, RunJobs, RunJobSpec, SecretKey, build_run_job
from achilles.k8s.run_metadata import RUN_SELECTOR
from achilles.services.dispatch import PARALLEL_CREATES
from bench.cluster import RUNS_NAMESPACE, BenchCluster
from bench.cpu_meter import CpuMeter
from bench.jobwatch import JobWatch
from bench.report import Progress, Report
from bench.workload import wait_until

CEILING_RUN_IDS = 10_000_000  # the ceiling's Jobs' run ids: no run's


def measure_ceiling(
    cluster: BenchCluster, size: int, agents_namespace: str, report: Report, progress: Progress
) -> float:
    """Seconds for `size` run Jobs created straight to the API server, the dispatcher's
    way (its create call, `PARALLEL_CREATES` at a time), until the watch saw them all.
    Their agents are named as the burst's, in `agents_namespace`."""
    template = JobTemplate(
        namespace=RUNS_NAMESPACE,
        image="achilles-runner:bench",
        database_secret=SecretKey("achilles-database", "url"),
        command=("/bin/true",),
    )
    now = datetime.now(UTC)
    secrets = [RunSecret.new() for _ in range(size)]
    manifests = [
        build_run_job(
            RunJobSpec(
                run_id=CEILING_RUN_IDS + i,
                agent_id=i,
                agent_uid=None,
                agent_namespace=agents_namespace,
                agent_name=f"burst-{i}",
                trigger="scheduled",
                scheduled_for=now,
                run_timeout_seconds=3600,
                model_secret=None,
                run_secret=secrets[i],
            ),
            template,
        )
        for i in range(size)
    ]
    jobs = RunJobs(cluster.api, RUNS_NAMESPACE)
    watcher = JobWatch(cluster.api, RUNS_NAMESPACE, RUN_SELECTOR).start()
    progress(f"ceiling: {size:,} Job creates straight to the API server")
    cpu = CpuMeter(cluster, bench=True)
    started = time.time()
    with ThreadPoolExecutor(max_workers=PARALLEL_CREATES) as pool:
        made = sum(pool.map(jobs.create, manifests, secrets))
    returned = time.time() - started
    if made != size:
        raise RuntimeError(f"ceiling: {made} of {size} Jobs created (leftovers in the namespace?)")
    wait_until(
        lambda: watcher.count() >= size,
        120,
        f"the watch to see {size:,} Jobs",
        progress,
        every=0.05,
    )
    cpu.report(report, "ceiling: cores used, first call -> all Jobs seen")
    seen = watcher.snapshot()
    watcher.stop()
    took = max(job.seen_at for job in seen) - started
    report.add_value(
        "ceiling: N Jobs straight to the API server (first call -> last watch event)",
        took,
        "s",
        note=f"{PARALLEL_CREATES} in parallel, the dispatcher's create call, no operator; "
        f"the calls returned after {returned:.2f} s",
    )
    report.add_value("ceiling: Job creates a second", size / took, "/s")
    return took
