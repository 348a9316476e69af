"""The stand-in's HTTPS endpoint for `kubectl logs`.

`kubectl logs` asks the API server, which dials the node's kubelet endpoint (the Node's
`daemonEndpoints.kubeletEndpoint.Port` on its InternalIP) at
`/containerLogs/<namespace>/<pod>/<container>`. We serve that path from the log files
the shims write, to clients holding a certificate of our CA (the API server does).
Supported query parameters: `tailLines`, `limitBytes` and `follow`.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

# (namespace, pod, container) -> is that container still running here?
IsRunning = Callable[[str, str, str], bool]
_FOLLOW_POLL_S = 0.2  # how often a followed log file is read for new output


def find_log(pods_dir: Path, namespace: str, pod: str, container: str) -> Path | None:
    """The newest log of that pod name (a Job's retry reuses no names, a bare pod may)."""
    candidates = [d / f"{container}.log" for d in pods_dir.glob(f"{namespace}_{pod}_*")]
    existing = [c for c in candidates if c.is_file()]
    return max(existing, key=lambda p: p.stat().st_mtime) if existing else None


def _tail(data: bytes, lines: int | None) -> bytes:
    if lines is None:
        return data
    if lines <= 0:
        return b""
    return b"".join(data.splitlines(keepends=True)[-lines:])


def _handler(pods_dir: Path, is_running: IsRunning) -> type[BaseHTTPRequestHandler]:
    class ContainerLogs(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            log.debug("log endpoint: " + format, *args)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if len(parts) != 4 or parts[0] != "containerLogs":
                self.send_error(404, "only /containerLogs/<namespace>/<pod>/<container> is served")
                return
            _, namespace, pod, container = parts
            path = find_log(pods_dir, namespace, pod, container)
            if path is None:
                self.send_error(404, f"no log of container {container} in pod {namespace}/{pod}")
                return
            query = parse_qs(url.query)
            tail = int(query["tailLines"][0]) if "tailLines" in query else None
            limit = int(query["limitBytes"][0]) if "limitBytes" in query else None
            follow = query.get("follow", ["false"])[0] == "true"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()
            with path.open("rb") as handle:
                chunk = _tail(handle.read(), tail)
                self.wfile.write(chunk[:limit] if limit is not None else chunk)
                if not follow:
                    return
                self._follow(handle, lambda: is_running(namespace, pod, container))

        def _follow(self, handle: BinaryIO, running: Callable[[], bool]) -> None:
            try:
                while True:
                    still_running = running()
                    data = handle.read()
                    if data:
                        self.wfile.write(data)
                        self.wfile.flush()
                    elif not still_running:
                        return
                    else:
                        time.sleep(_FOLLOW_POLL_S)  # waiting for the process to write more
            except (BrokenPipeError, ConnectionResetError):
                return

    return ContainerLogs


def serve_logs(
    port: int, pods_dir: Path, cert: Path, key: Path, client_ca: Path, is_running: IsRunning
) -> ThreadingHTTPServer:
    """Start serving on 127.0.0.1:`port` in a daemon thread; returns the server."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(pods_dir, is_running))
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    context.load_verify_locations(str(client_ca))
    context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
