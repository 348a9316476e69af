"""Reference MCP servers from the registries, for the tests and the local stack (issue 38).

Nobody here wrote them: `@modelcontextprotocol/server-everything` (npm; it speaks
streamable HTTP itself) exercises the protocol's features; `mcp-server-time` (PyPI) has
read-only tools and `@modelcontextprotocol/server-memory` (npm) write tools; those two
speak stdio only, so `supergateway` (npm) serves each over streamable HTTP, one child
process per MCP session.

Each is installed once per version under `~/.cache/achilles/mcp/<name>-<version>` (or
`$ACHILLES_CACHE_DIR/mcp/`; never in the repository) with the registry's own client
(`npm install`, `uv pip install`), and started as a process of its own on a leased
port; `start` returns once the server answers an MCP listing.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from achilles.errors import LocalStackError
from achilles.mcp_client.client import McpEndpoint, McpUnreachable, list_tools
from achilles_dev.ports import free_port, release
from achilles_dev.versions import cache_root
from achilles_dev.waiting import poll

EVERYTHING_VERSION = "2026.8.31"
MEMORY_VERSION = "2026.8.31"
TIME_VERSION = "2026.10.19"
SUPERGATEWAY_VERSION = "4.0.0"
# Written into an install's directory once the install finished.
INSTALLED_STAMP = ".installed"
START_TIMEOUT = 120.0
# One listing's bound: a stdio server behind supergateway starts a process per session,
# which takes 3-4 s on a quiet machine and ten times that on a loaded one; a listing given
# up leaves that process behind until the session's idle timeout.
LISTING_TIMEOUT = 60.0


def _npm(package: str, version: str, binary: str) -> Path:
    """`binary` of npm `package@version`, installed once into the cache."""
    home = cache_root() / "mcp" / f"{package.rsplit('/', 1)[-1]}-{version}"

    def install() -> None:
        npm = shutil.which("npm")
        if npm is None:
            raise LocalStackError(
                "npm is needed for the reference MCP servers (apt-get install npm)"
            )
        home.mkdir(parents=True)
        subprocess.run(
            [npm, "install", "--prefix", str(home), f"{package}@{version}", "--no-audit",
             "--no-fund", "--loglevel=error"],
            check=True,
        )  # fmt: skip

    install_once(home, install)
    return home / "node_modules" / ".bin" / binary


def _pypi(package: str, version: str, binary: str) -> Path:
    """`binary` of PyPI `package==version`, in a virtual environment of its own."""
    home = cache_root() / "mcp" / f"{package}-{version}"

    def install() -> None:
        uv = shutil.which("uv")
        if uv is None:
            raise LocalStackError("uv is needed for the reference MCP servers")
        subprocess.run([uv, "venv", "-q", "-p", "3.11", str(home)], check=True)
        subprocess.run(
            [uv, "pip", "install", "-q", f"{package}=={version}"],
            check=True,
            env={**os.environ, "VIRTUAL_ENV": str(home)},
        )

    install_once(home, install)
    return home / "bin" / binary


def install_once(home: Path, install: Callable[[], None]) -> None:
    """Run `install` into the empty directory `home` unless a finished install is there.

    Under a lock: the test workers and a `make dev` ask at once on a cold cache, and a
    second `npm install` into the same prefix moves the first one's `node_modules` aside
    while it runs (a worker's binary was gone just after its own install). The stamp is
    written last, so an install killed half-way is started again from nothing."""
    stamp = home / INSTALLED_STAMP
    if stamp.exists():
        return
    home.parent.mkdir(parents=True, exist_ok=True)
    with (home.parent / f".{home.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():  # another process installed it while this one waited
            return
        shutil.rmtree(home, ignore_errors=True)
        install()
        stamp.touch()


def everything_binary() -> Path:
    return _npm(
        "@modelcontextprotocol/server-everything", EVERYTHING_VERSION, "mcp-server-everything"
    )


def memory_binary() -> Path:
    return _npm("@modelcontextprotocol/server-memory", MEMORY_VERSION, "mcp-server-memory")


def time_binary() -> Path:
    return _pypi("mcp-server-time", TIME_VERSION, "mcp-server-time")


def supergateway_binary() -> Path:
    return _npm("supergateway", SUPERGATEWAY_VERSION, "supergateway")


@dataclass
class McpServer:
    """A running reference server: its streamable-HTTP URL and its process."""

    name: str
    url: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    # Files of the server's own state (server-memory's), for checks on the server's side.
    state: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        release([self.port])


def answers(url: str) -> bool:
    """Whether an MCP server at `url` lists its tools. On a thread of its own: the SDK
    client runs an event loop, and a caller may be inside one (Playwright's sync API)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_answers, url).result()


def _answers(url: str) -> bool:
    try:
        list_tools(McpEndpoint(url, LISTING_TIMEOUT))
    except McpUnreachable:
        return False
    return True


def _start(
    name: str,
    argv: list[str],
    *,
    port: int,
    workdir: Path,
    env: dict[str, str],
    state: Path | None = None,
) -> McpServer:
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=workdir,
            start_new_session=True,  # its children (supergateway's) stop with it
        )
    server = McpServer(name, f"http://127.0.0.1:{port}/mcp", port, process, log, state)
    try:
        ready = poll(lambda: process.poll() is not None or answers(server.url),
                     timeout=START_TIMEOUT, interval=0.1)  # fmt: skip
    except BaseException:
        server.stop()  # never left behind, whatever stopped the wait
        raise
    if not ready or process.poll() is not None:
        server.stop()
        raise LocalStackError(
            f"MCP server {name} did not answer on {server.url} within {START_TIMEOUT:g} s"
            f" (log: {log})"
        )
    return server


def start_everything(workdir: Path, port: int | None = None) -> McpServer:
    """server-everything on `port` (leased by the caller, released by `stop`), or on a
    port leased here."""
    port = free_port("127.0.0.1") if port is None else port
    argv = [str(everything_binary()), "streamableHttp"]
    return _start("server-everything", argv, port=port, workdir=workdir,
                  env={"PORT": str(port)})  # fmt: skip


# supergateway answers "ok" here once it listens (`achilles dev status`' cheap check; an
# MCP listing would start a child process per look).
HEALTH_PATH = "/healthz"


def _gateway(stdio_command: str, port: int) -> list[str]:
    """supergateway serving `stdio_command` over streamable HTTP on `port` (every
    interface: it has no option to choose one)."""
    return [
        str(supergateway_binary()), "--stdio", stdio_command, "--outputTransport",
        "streamableHttp", "--stateful", "--port", str(port), "--logLevel", "none",
        "--healthEndpoint", HEALTH_PATH,
    ]  # fmt: skip


def time_argv(port: int) -> list[str]:
    """mcp-server-time (read-only tools) over streamable HTTP on `port`."""
    return _gateway(f"{time_binary()} --local-timezone UTC", port)


def memory_argv(port: int) -> list[str]:
    """server-memory (write tools) over streamable HTTP on `port`; its knowledge graph is
    the file `memory_env` names."""
    return _gateway(str(memory_binary()), port)


def memory_env(state: Path) -> dict[str, str]:
    return {"MEMORY_FILE_PATH": str(state)}


def start_time(workdir: Path) -> McpServer:
    port = free_port("127.0.0.1")
    return _start("mcp-server-time", time_argv(port), port=port, workdir=workdir,
                  env={})  # fmt: skip


def start_memory(workdir: Path) -> McpServer:
    port = free_port("127.0.0.1")
    state = workdir / "memory.jsonl"
    return _start("server-memory", memory_argv(port), port=port,
                  workdir=workdir, env=memory_env(state), state=state)  # fmt: skip


def memory_entities(state: Path) -> list[str]:
    """The names of the entities in server-memory's file (its own record of the writes
    it made), in the order written."""
    if not state.exists():
        return []
    lines = [json.loads(line) for line in state.read_text().splitlines() if line.strip()]
    return [line["name"] for line in lines if line.get("type") == "entity"]
