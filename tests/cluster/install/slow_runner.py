"""A stand-in for the runner where the LLM is not the point: claim the run, take the
inbox replies as the runner's inbox start note does (agents with the inbox tool),
heartbeat, hold it for ACHILLES_TEST_HOLD_SECONDS, succeed. With ACHILLES_TEST_CLAIM_GATE
(`host:port`, a `ClaimGate` of the test, tests/cluster/install/operator_support.py) it
waits before its claim until the gate answers (a pod that started, held at the door
while a test closes a lock). Run by the Job as `python -c <this file> --run-id N` in the
runner image (the operator appends `--run-id N`), as the runner's login with the run's
secret from the Job, as `achilles runner` connects."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

from achilles.db.database import Database
from achilles.db.inbox.replies import take_unprocessed_replies
from achilles.domain.run_secret import RUN_SECRET_ENV, session_settings
from achilles.services.run_journal import RunJournal


def main() -> int:
    # The kubelet's SIGTERM ends it at once, as it ends a process outside a container (a
    # container's pid 1 has no default action for it: the pod would take its whole grace
    # period to go).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    run_id = int(sys.argv[sys.argv.index("--run-id") + 1])
    hold = float(os.environ.get("ACHILLES_TEST_HOLD_SECONDS", "3"))
    secret = os.environ.get(RUN_SECRET_ENV)
    database = Database(
        os.environ["ACHILLES_DATABASE_URL"],
        pool_size=1,
        session_settings=session_settings(run_id, secret) if secret else None,
    )
    journal = RunJournal(database)
    gate = os.environ.get("ACHILLES_TEST_CLAIM_GATE")
    if gate:
        host, _, port = gate.rpartition(":")
        # Blocks until the test opens the gate (a byte, or the gate closing the connection);
        # the pod's deadline bounds it.
        with socket.create_connection((host, int(port))) as door:
            door.recv(1)
    spec = journal.claim(run_id)
    if spec is None:
        return 0
    if "inbox" in spec.tool_implementations:
        with database.transaction() as session:
            take_unprocessed_replies(session, spec.agent_id)
    deadline = time.monotonic() + hold
    while time.monotonic() < deadline:
        if not journal.heartbeat(run_id):
            return 0  # reaped: stop writing
        time.sleep(0.5)
    journal.succeed(run_id, f"held {hold} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
