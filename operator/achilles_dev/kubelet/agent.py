"""The stand-in's reconcile loop: bind pending pods, run bound ones, report, clean up.

Each pod is reconciled from what the API says (the informer's latest copy) and what we
know locally (its `PodRun`). The rules are the kubelet's, for pods without init
containers:

* an unscheduled pod of a served namespace is bound to our node (there is no scheduler);
* a bound pod's containers are started as processes; restartPolicy decides restarts,
  with the kubelet's doubling back-off;
* a pod being deleted gets SIGTERM, SIGKILL after its grace period, a final status,
  and then our delete with grace 0, which is how a kubelet lets a pod go;
* `activeDeadlineSeconds` on the pod ends it as Failed/DeadlineExceeded;
* after a restart of the stand-in, recorded runs whose shims still live are adopted;
  a pod that had started but whose process is lost is failed, never re-run silently.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from achilles_dev.kubelet.api import PodApi
from achilles_dev.kubelet.environment import (
    ContainerConfigError,
    container_command,
    container_environment,
)
from achilles_dev.kubelet.node import node_labels
from achilles_dev.kubelet.runs import ContainerRun, PodRun, load_records, pod_directory
from achilles_dev.kubelet.runtime import (
    LOST_MESSAGE,
    ProcessRuntime,
    base_environment,
    mark_lost,
)
from achilles_dev.kubelet.status import (
    comparable,
    is_final,
    now,
    phase,
    pod_status,
    terminated_state,
)
from achilles_dev.kubelet.workqueue import WorkQueue
from achilles_dev.processes import is_alive

log = logging.getLogger(__name__)

Pod = dict[str, Any]
_CONFIG_RETRY_S = 2.0
_ERROR_RETRY_S = 2.0
_BACKOFF_START_S, _BACKOFF_MAX_S = 10.0, 300.0
_DEFAULT_GRACE_S = 30


def _terminal(pod: Pod) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def _grace_seconds(pod: Pod) -> int:
    metadata, spec = pod["metadata"], pod["spec"]
    grace = metadata.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds", _DEFAULT_GRACE_S)
    return int(grace)


def _parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


class StandIn:
    def __init__(self, api: PodApi, node: str, pods_dir: Path, max_pods: int) -> None:
        self.api = api
        self.node = node
        self.pods_dir = pods_dir
        self.max_pods = max_pods
        self.queue = WorkQueue()
        self.runtime = ProcessRuntime(on_exit=self.queue.add)
        self._pods: dict[str, Pod] = {}
        self._runs: dict[str, PodRun] = {}

    # --- inputs -------------------------------------------------------------------------

    def observe(self, pod: Pod, *, deleted: bool = False) -> None:
        """An informer saw `pod` change (or disappear)."""
        uid = pod["metadata"]["uid"]
        if deleted:
            self._pods.pop(uid, None)
        else:
            self._pods[uid] = pod
        self.queue.add(uid)

    def adopt_recorded_runs(self) -> None:
        """Take over the runs a previous stand-in left behind; each gets reconciled."""
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        for uid, run in load_records(self.pods_dir).items():
            self._runs[uid] = run
            for container in run.containers.values():
                if container.shim and is_alive(container.shim):
                    log.info(
                        "adopting %s/%s container %s (shim pid %d)",
                        run.namespace,
                        run.name,
                        container.name,
                        container.shim.pid,
                    )
                    self.runtime.watch(uid, container.shim)
            self.queue.add(uid)

    def container_running(self, namespace: str, name: str, container: str) -> bool:
        """For the log endpoint's `follow` (called from its threads: reads a snapshot)."""
        for run in list(self._runs.values()):
            if (run.namespace, run.name) == (namespace, name):
                current = run.containers.get(container)
                if current is not None and current.is_running:
                    return True
        return False

    # --- the loop -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            uid = self.queue.get(timeout=0.5)
            if uid is None:
                continue
            try:
                self.reconcile(uid)
            except Exception:  # one pod's API or host error must not stop the node
                log.exception("reconciling pod %s failed; retrying", uid)
                self.queue.add_after(uid, _ERROR_RETRY_S)

    def reconcile(self, uid: str) -> None:
        pod = self._pods.get(uid)
        run = self._runs.get(uid)
        if pod is None:
            if run is not None:
                self._forget_vanished(run)
            return
        spec, metadata = pod["spec"], pod["metadata"]
        if not spec.get("nodeName"):
            self._bind(pod)
            return
        if spec["nodeName"] != self.node:
            return
        if run is None:
            if _terminal(pod):
                if metadata.get("deletionTimestamp"):
                    self.api.finish_deletion(pod)
                return
            run = self._new_run(pod)
        if run.finalized:
            return
        for container in run.containers.values():
            if container.is_running and self.runtime.collect(
                run, container, self._spec(pod, container)
            ):
                self._after_exit(pod, run, container)
        if metadata.get("deletionTimestamp"):
            self._stop_for_deletion(pod, run)
            return
        self._enforce_active_deadline(pod, run)
        if spec.get("initContainers") and not run.failure_reason:
            run.failure_reason = "UnsupportedPod"
            run.failure_message = "the kubelet stand-in does not run init containers"
        if run.failure_reason:
            self._stop_all(run, grace=_grace_seconds(pod))
        else:
            self._start_due(pod, run)
        self._report(pod, run)
        if phase(run) in ("Succeeded", "Failed") and not any(
            c.is_running for c in run.containers.values()
        ):
            run.forget()  # nothing left to adopt after a restart

    # --- steps --------------------------------------------------------------------------

    def _bind(self, pod: Pod) -> None:
        spec, metadata = pod["spec"], pod["metadata"]
        if metadata.get("deletionTimestamp") or _terminal(pod):
            return
        if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
            return
        selector: Mapping[str, str] = spec.get("nodeSelector") or {}
        if any(node_labels(self.node).get(k) != v for k, v in selector.items()):
            return
        active = sum(
            1 for r in self._runs.values() if not r.finalized and phase(r) in ("Pending", "Running")
        )
        if active >= self.max_pods:
            self.queue.add_after(metadata["uid"], _CONFIG_RETRY_S)
            return
        if self.api.bind(pod, self.node):
            log.info("bound %s/%s to %s", metadata["namespace"], metadata["name"], self.node)

    def _new_run(self, pod: Pod) -> PodRun:
        metadata = pod["metadata"]
        directory = pod_directory(
            self.pods_dir, metadata["namespace"], metadata["name"], metadata["uid"]
        )
        directory.mkdir(parents=True, exist_ok=True)
        run = PodRun(
            uid=metadata["uid"],
            namespace=metadata["namespace"],
            name=metadata["name"],
            directory=directory,
            started_at=pod.get("status", {}).get("startTime") or now(),
        )
        for spec in pod["spec"]["containers"]:
            run.containers[spec["name"]] = ContainerRun(name=spec["name"])
        if self._had_started(pod):
            # It ran under a stand-in that kept no record of it: the process is lost.
            for container in run.containers.values():
                mark_lost(container)
            run.failure_reason, run.failure_message = "ContainerStatusUnknown", LOST_MESSAGE
            log.warning(
                "pod %s/%s was running without a record: failing it", run.namespace, run.name
            )
        else:
            run.save()
        self._runs[run.uid] = run
        return run

    @staticmethod
    def _had_started(pod: Pod) -> bool:
        status = pod.get("status", {})
        if status.get("phase") == "Running":
            return True
        return any(
            "running" in (s.get("state") or {}) or "terminated" in (s.get("state") or {})
            for s in status.get("containerStatuses") or []
        )

    @staticmethod
    def _spec(pod: Pod, container: ContainerRun) -> dict[str, Any]:
        for spec in pod["spec"]["containers"]:
            if spec["name"] == container.name:
                return dict(spec)
        return {}

    def _after_exit(self, pod: Pod, run: PodRun, container: ContainerRun) -> None:
        policy = pod["spec"].get("restartPolicy", "Always")
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        wants_restart = policy == "Always" or (policy == "OnFailure" and container.exit_code != 0)
        if deleting or run.failure_reason or not wants_restart:
            return
        delay = min(_BACKOFF_START_S * 2**container.attempt, _BACKOFF_MAX_S)
        container.restart_not_before = time.monotonic() + delay
        container.waiting_reason = "CrashLoopBackOff"
        container.waiting_message = (
            f"back-off {delay:.0f}s restarting failed container={container.name} pod={run.name}"
        )
        self.queue.add_after(run.uid, delay)

    def _start_due(self, pod: Pod, run: PodRun) -> None:
        for container in run.containers.values():
            if container.is_running or is_final(container):
                continue
            if container.restart_not_before is not None:
                if time.monotonic() < container.restart_not_before:
                    continue
                container.last_terminated = terminated_state(container)
                container.attempt += 1
                container.restart_not_before = None
                # The new attempt has not started until its shim runs (config may still fail).
                container.shim = None
                container.exit_code = container.finished_at = None
                container.reason = container.message = None
            self._start(pod, run, container)

    def _start(self, pod: Pod, run: PodRun, container: ContainerRun) -> None:
        spec = self._spec(pod, container)
        try:
            env = container_environment(pod, spec, self.api.lookup, base_environment(run.name))
            command = container_command(spec, env)
        except ContainerConfigError as error:
            container.waiting_reason, container.waiting_message = (
                "CreateContainerConfigError",
                str(error),
            )
            self.queue.add_after(run.uid, _CONFIG_RETRY_S)
            return
        container.waiting_reason = container.waiting_message = None
        termination_path = spec.get("terminationMessagePath", "/dev/termination-log")
        self.runtime.start(run, container, command, env, spec.get("workingDir"), termination_path)

    def _enforce_active_deadline(self, pod: Pod, run: PodRun) -> None:
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline is None or run.failure_reason or run.started_at is None:
            return
        elapsed = (
            datetime.datetime.now(datetime.UTC) - _parse_time(run.started_at)
        ).total_seconds()
        if elapsed >= int(deadline):
            run.failure_reason = "DeadlineExceeded"
            run.failure_message = "Pod was active on the node longer than the specified deadline"
        else:
            self.queue.add_after(run.uid, int(deadline) - elapsed)

    def _stop_all(self, run: PodRun, *, grace: int) -> None:
        """Stop every container: SIGTERM now, SIGKILL once the grace period is over."""
        for container in run.containers.values():
            if container.shim is None and container.exit_code is None:
                mark_lost(container)
            container.restart_not_before = None
            container.waiting_reason = container.waiting_message = None
        if run.kill_deadline is None:
            run.kill_deadline = time.monotonic() + grace
            for container in run.containers.values():
                self.runtime.terminate(container)
            self.queue.add_after(run.uid, grace)
        elif time.monotonic() >= run.kill_deadline:
            for container in run.containers.values():
                self.runtime.kill(container)

    def _stop_for_deletion(self, pod: Pod, run: PodRun) -> None:
        self._stop_all(run, grace=_grace_seconds(pod))
        self._report(pod, run)
        if any(c.is_running for c in run.containers.values()):
            return
        self.api.finish_deletion(pod)
        run.finalized = True
        run.forget()

    def _forget_vanished(self, run: PodRun) -> None:
        """The pod left the API (or our view): make sure, then kill whatever still runs."""
        try:
            current = self.api.read_pod(run.namespace, run.name)
        except ApiException as error:
            if error.status != 404:
                raise
            current = None
        if current is not None and current["metadata"]["uid"] == run.uid:
            self.observe(current)
            return
        for container in run.containers.values():
            self.runtime.kill(container)
        run.forget()
        del self._runs[run.uid]

    def _report(self, pod: Pod, run: PodRun) -> None:
        status = pod_status(pod, run)
        key = comparable(status)
        if key == run.last_reported:
            return
        self.api.patch_status(pod, status)
        run.last_reported = key
