"""A PostgreSQL server of our own for the local stack and the test suite.

We run the distribution's server binaries on a data directory we own, so nothing
depends on a system-wide cluster. PostgreSQL refuses to run as root; when we are
root the server runs as the `postgres` system user (via `runuser`) and its data
lives where that user can reach it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.ports import free_port
from achilles_dev.waiting import poll

SUPERUSER = "postgres"
_PG_ROOT = Path("/usr/lib/postgresql")
_READY_TIMEOUT_S = 60.0


def pg_bin_dir() -> Path:
    """The newest installed server's bin directory (Debian layout), or the PATH's."""
    if _PG_ROOT.is_dir():
        versions = sorted(
            (p for p in _PG_ROOT.iterdir() if (p / "bin" / "pg_ctl").exists()),
            key=lambda p: int(p.name) if p.name.isdigit() else 0,
        )
        if versions:
            return versions[-1] / "bin"
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl is None:
        raise LocalStackError(
            "PostgreSQL server binaries not found; install them "
            "(Debian: apt-get install postgresql)"
        )
    return Path(pg_ctl).parent


def default_data_root() -> Path:
    """Where data directories live: reachable by the user the server runs as."""
    if os.geteuid() == 0:
        return Path("/var/lib/postgresql/achilles")
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "achilles" / "postgres"


@dataclass(frozen=True)
class LocalPostgres:
    """A running server reachable on 127.0.0.1:`port` as the trusted superuser."""

    data_dir: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def libpq_dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(_as_server_user(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LocalStackError(
            f"{' '.join(argv[:2])} failed (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()}"
        )
    return result


def _prepare_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(path, user="postgres", group="postgres")
        path.chmod(0o700)


def is_running(data_dir: Path) -> bool:
    if not (data_dir / "PG_VERSION").exists():
        return False
    status = subprocess.run(
        _as_server_user([str(pg_bin_dir() / "pg_ctl"), "status", "-D", str(data_dir)]),
        capture_output=True,
        check=False,
    )
    return status.returncode == 0


def ensure_running(
    data_dir: Path,
    port: int,
    *,
    durable: bool = True,
    listen: tuple[str, ...] = (),
    pod_networks: tuple[str, ...] = (),
) -> LocalPostgres:
    """Initialise (once) and start (if stopped) a server; return when it accepts connections.

    `durable=False` turns off fsync: right for throw-away test clusters only. `listen`
    adds addresses besides 127.0.0.1 (the host's end of a real node's veth, for pods),
    `pod_networks` the networks whose clients log in with a password (the pods': each
    component with its own login, see `achilles_dev.logins`). 127.0.0.1 stays trusted:
    the person's own CLI and the tests on this machine.
    """
    server = LocalPostgres(data_dir=data_dir, port=port)
    bin_dir = pg_bin_dir()
    if data_dir.parent != data_dir:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
    if not (data_dir / "PG_VERSION").exists():
        _prepare_dir(data_dir)
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ]
        )
    ensure_pod_access(data_dir, pod_networks)
    addresses = ",".join(("127.0.0.1", *listen))
    if is_running(data_dir) and _listen_addresses(server) != addresses:
        stop(data_dir)  # started before the node network existed: listen on it too
    if not is_running(data_dir):
        options = [
            f"-p {port}",
            f"-c listen_addresses={addresses}",
            f"-c unix_socket_directories={data_dir}",
            "-c max_connections=300",
        ]
        if not durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        _run(
            [
                str(bin_dir / "pg_ctl"),
                "start",
                "-D",
                str(data_dir),
                "-l",
                str(server.log_file),
                "-w",
                "-t",
                str(int(_READY_TIMEOUT_S)),
                "-o",
                " ".join(options),
            ]
        )
    _wait_accepting(server)
    return server


# The pg_hba.conf lines of the pods' networks follow this comment (and nothing else does).
_POD_ACCESS_COMMENT = "# achilles dev: the real node's pods"


def pod_access_lines(networks: tuple[str, ...]) -> list[str]:
    """A password (SCRAM) for everyone from the pods' networks: no pod logs in as anyone
    without that login's password (trust would let any pod be the superuser)."""
    return [f"host all all {network} scram-sha-256" for network in networks]


def ensure_pod_access(data_dir: Path, networks: tuple[str, ...]) -> None:
    """The pods' lines of pg_hba.conf: exactly `pod_access_lines(networks)`. Ours are the
    single-spaced `host all all` lines (initdb's are column-aligned): an earlier stack's
    (`trust`, or another node network's) are replaced."""
    hba = data_dir / "pg_hba.conf"
    lines = hba.read_text().splitlines()
    ours = ("host all all ", _POD_ACCESS_COMMENT)
    kept = [line for line in lines if not line.startswith(ours)]
    wanted = [_POD_ACCESS_COMMENT, *pod_access_lines(networks)] if networks else []
    if kept + wanted == lines:
        return
    hba.write_text("\n".join([*kept, *wanted]) + "\n")
    if is_running(data_dir):
        _run([str(pg_bin_dir() / "pg_ctl"), "reload", "-D", str(data_dir)])


def _listen_addresses(server: LocalPostgres) -> str | None:
    import psycopg

    try:
        with psycopg.connect(server.libpq_dsn(), connect_timeout=5) as connection:
            row = connection.execute("SHOW listen_addresses").fetchone()
    except psycopg.Error:
        return None
    return str(row[0]) if row else None


def start_throwaway(
    data_dir: Path,
    *,
    attempts: int = 5,
    listen: tuple[str, ...] = (),
    pod_networks: tuple[str, ...] = (),
) -> LocalPostgres:
    """A new non-durable server in `data_dir` on a free loopback port (tests, benchmarks);
    `listen` and `pod_networks` as for `ensure_running` (a kind cluster's pods).

    A port reported free can be taken before the server binds it; then the start
    fails and we try another one.
    """
    for attempt in range(1, attempts + 1):
        try:
            return ensure_running(
                data_dir, free_port(), durable=False, listen=listen, pod_networks=pod_networks
            )
        except LocalStackError:
            if attempt == attempts:
                raise
            stop(data_dir)
    raise AssertionError("unreachable")


def _wait_accepting(server: LocalPostgres) -> None:
    pg_isready = str(pg_bin_dir() / "pg_isready")
    probe = [pg_isready, "-h", "127.0.0.1", "-p", str(server.port), "-U", SUPERUSER]

    def accepting() -> bool:
        return subprocess.run(probe, capture_output=True, check=False).returncode == 0

    if not poll(accepting, timeout=_READY_TIMEOUT_S, interval=0.1):
        raise LocalStackError(f"PostgreSQL on port {server.port} not ready; see {server.log_file}")


def stop(data_dir: Path) -> bool:
    """Stop the server if it runs; True if it was running."""
    if not is_running(data_dir):
        return False
    _run([str(pg_bin_dir() / "pg_ctl"), "stop", "-D", str(data_dir), "-m", "fast", "-w"])
    return True
