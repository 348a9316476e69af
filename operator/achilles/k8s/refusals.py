"""What a failed create of a run's Job or Secret says: refused for sure (the run stays
queued, nothing was made), or maybe made (the request may have reached the API server),
and how long a create waits (`CREATE_TIMEOUT`). Shared by k8s/jobs.py and
k8s/run_secrets.py."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError

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


def rejected(exc: ApiException) -> JobRejected:
    # 500 and 504 may come after the write reached storage (the API server's own
    # timeouts); a 0 is the client's TLS failure, phase unknown. Other statuses refuse.
    return JobRejected(
        exc.status,
        f"{exc.status} {exc.reason}: {body_message(exc)}",
        maybe_created=exc.status in (0, 500, 504),
    )


def not_sent(exc: Exception) -> bool:
    """The request never reached the API server: no connection was made."""
    reason = exc.reason if isinstance(exc, MaxRetryError) else exc
    return isinstance(reason, (ConnectTimeoutError, ConnectionRefusedError))


def body_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message", exc.body))
    except ValueError:
        return str(exc.body)
