"""Seeing Jobs (or pods) appear: a watch on one namespace that records, for every object
created, the instant its ADDED event arrived and its `creationTimestamp` (whole seconds)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException


def _field(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _version_of(listing: Any) -> str:
    return str(listing.metadata.resource_version)


@dataclass(frozen=True)
class SeenJob:
    name: str
    seen_at: float  # time.time() when the ADDED event arrived
    created: datetime  # the API server's creationTimestamp (1 s resolution)
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass
class JobWatch:
    """Watches `namespace` from now on; `jobs` fills as Jobs (with `pods=True`, pods)
    are created."""

    api: client.ApiClient
    namespace: str
    label_selector: str | None = None
    pods: bool = False
    jobs: dict[str, SeenJob] = field(default_factory=dict)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _lister(self) -> Any:
        if self.pods:
            return client.CoreV1Api(self.api).list_namespaced_pod
        return client.BatchV1Api(self.api).list_namespaced_job

    def start(self) -> JobWatch:
        listing = self._lister()(self.namespace, label_selector=self.label_selector)
        for job in listing.items:
            self._record(job, time.time())
        self._thread = threading.Thread(target=self._run, args=(_version_of(listing),), daemon=True)
        self._thread.start()
        return self

    def _record(self, job: Any, seen_at: float) -> None:
        name = job.metadata.name
        with self._lock:
            if name not in self.jobs:
                self.jobs[name] = SeenJob(
                    name=name,
                    seen_at=seen_at,
                    created=job.metadata.creation_timestamp,
                    labels=dict(job.metadata.labels or {}),
                    annotations=dict(job.metadata.annotations or {}),
                )

    def _run(self, resource_version: str) -> None:
        lister = self._lister()
        try:
            while not self._stop.is_set():
                stream = watch.Watch()
                try:
                    for event in stream.stream(
                        lister,
                        self.namespace,
                        label_selector=self.label_selector,
                        resource_version=resource_version,
                        timeout_seconds=60,
                        allow_watch_bookmarks=True,
                    ):
                        seen_at = time.time()
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            # Usually 410 Gone as an event: list again, below.
                            raise ApiException(status=int(_field(obj, "code") or 500))
                        if isinstance(obj, dict):  # a BOOKMARK: only a resourceVersion
                            resource_version = _field(obj, "metadata", "resourceVersion")
                        else:
                            resource_version = obj.metadata.resource_version
                        if event["type"] == "ADDED":
                            self._record(obj, seen_at)
                        if self._stop.is_set():
                            break
                except ApiException as exc:
                    if exc.status != 410:
                        raise
                    # Expired: list again (whatever appeared meanwhile is recorded at
                    # list time, later than it was created: it only makes us slower).
                    listing = lister(self.namespace, label_selector=self.label_selector)
                    now = time.time()
                    for job in listing.items:
                        self._record(job, now)
                    resource_version = _version_of(listing)
                finally:
                    stream.stop()
        except BaseException as exc:  # surfaced by `count`/`snapshot`
            self.error = exc

    def count(self) -> int:
        if self.error is not None:
            raise RuntimeError(f"the Job watch on {self.namespace} failed: {self.error}")
        with self._lock:
            return len(self.jobs)

    def snapshot(self) -> list[SeenJob]:
        self.count()
        with self._lock:
            return list(self.jobs.values())

    def stop(self) -> None:
        self._stop.set()
