"""One stack's real node: how its components start, when they are ready, how it goes away.

`LocalStack` starts the three components like the control plane's (a pid file, a log,
a readiness probe): containerd, then the kubelet (ready when its Node is Ready), then
kube-proxy (ready when its health endpoint says it has synced the Services). Between
containerd and the kubelet the locally built images are loaded into containerd.

`teardown` is the reverse, and leaves nothing behind: the kubelet stops first (so it
recreates nothing), every pod sandbox is stopped and removed through the CRI (which
also releases their CNI state), kube-proxy and containerd stop, stray shims and
processes in the stack's cgroup subtree are killed, mounts under the node's directory
unmounted, the cgroup subtree and the network namespace removed.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.images import LocalImages
from achilles_dev.node import host, network
from achilles_dev.node.configs import (
    CONTAINERD_NAMESPACE,
    KUBE_PROXY_HEALTHZ_PORT,
    NodeLayout,
    kube_proxy_config,
    kubelet_config,
    write_configs,
)
from achilles_dev.node.network import NodeNetwork
from achilles_dev.pki import Pki
from achilles_dev.podman_store import image_id, podman_argv, podman_env
from achilles_dev.processes import stop_group

Report = Callable[[str], None]

COMPONENTS = ("containerd", "kubelet", "kube-proxy")
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def require_root() -> None:
    if os.geteuid() != 0:
        raise LocalStackError(
            "the real node needs root (network namespace, cgroups, mounts): run as root"
        )


# A Unix socket's path holds at most 107 bytes (sun_path); the kubelet binds its longest
# under its root dir (pod-resources/<10 digits>) and only says "bind: invalid argument".
_SOCKET_PATH_MAX = 107
_LONGEST_KUBELET_SOCKET = Path("pod-resources") / ("0" * 10)


def require_short_root(layout: NodeLayout) -> None:
    longest = layout.kubelet_root / _LONGEST_KUBELET_SOCKET
    if len(os.fsencode(longest)) > _SOCKET_PATH_MAX:
        raise LocalStackError(
            f"the state directory's path is too long for the real node's Unix sockets"
            f" ({len(os.fsencode(longest))} > {_SOCKET_PATH_MAX} bytes: {longest});"
            " use a shorter --state-dir"
        )


@dataclass(frozen=True)
class RealNode:
    name: str
    net: NodeNetwork
    layout: NodeLayout
    bin_dir: Path
    kubelet_kubeconfig: Path
    kube_proxy_kubeconfig: Path

    @property
    def cgroup_root(self) -> str:
        return host.cgroup_name(self.net.stack_id)

    # --- start ---------------------------------------------------------------------------

    def prepare(self, pki: Pki, pause_image: str) -> None:
        """Network namespace, cgroup subtree and every component's configuration."""
        require_root()
        require_short_root(self.layout)
        network.ensure_up(self.net)
        host.ensure_cgroup_root(self.cgroup_root)
        write_configs(
            self.net,
            self.layout,
            pause_image=pause_image,
            kubelet=kubelet_config(
                self.net,
                self.layout,
                cgroup_root=f"/{self.cgroup_root}",
                ca=pki.ca.cert,
                cert=pki.node_serving.cert,
                key=pki.node_serving.key,
            ),
            kube_proxy=kube_proxy_config(self.net, self.kube_proxy_kubeconfig, self.name),
        )

    def env(self) -> dict[str, str]:
        """PATH with our binaries (containerd finds its shim there) and the system's tools."""
        return {**os.environ, "PATH": f"{self.bin_dir}:{_SYSTEM_PATH}"}

    def argv(self, component: str) -> list[str]:
        if component == "containerd":
            command = [
                str(self.bin_dir / "containerd"),
                "--config",
                str(self.layout.containerd_config),
            ]
        elif component == "kubelet":
            command = [
                str(self.bin_dir / "kubelet"),
                f"--config={self.layout.kubelet_config}",
                f"--kubeconfig={self.kubelet_kubeconfig}",
                f"--root-dir={self.layout.kubelet_root}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.net.node_ip}",
                "--v=1",
            ]
        elif component == "kube-proxy":
            command = [
                str(self.bin_dir / "kube-proxy"),
                f"--config={self.layout.kube_proxy_config}",
                "--v=1",
            ]
        else:
            raise ValueError(component)
        return self.net.enter(command)

    def ctr(self, *args: str) -> list[str]:
        return [
            str(self.bin_dir / "ctr"),
            "--address",
            str(self.layout.containerd_socket),
            "--namespace",
            CONTAINERD_NAMESPACE,
            *args,
        ]

    def crictl(self, *args: str) -> list[str]:
        endpoint = self.layout.runtime_endpoint()
        return [
            str(self.bin_dir / "crictl"),
            "--runtime-endpoint",
            endpoint,
            "--image-endpoint",
            endpoint,
            "--timeout",
            "30s",
            *args,
        ]

    def containerd_is_ready(self) -> bool:
        if not self.layout.containerd_socket.exists():
            return False
        done = subprocess.run(self.ctr("version"), capture_output=True, check=False)
        return done.returncode == 0

    def kube_proxy_is_ready(self) -> bool:
        url = f"http://{self.net.node_ip}:{KUBE_PROXY_HEALTHZ_PORT}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    # --- images --------------------------------------------------------------------------

    def load_images(self, images: LocalImages, report: Report) -> None:
        """Import the images containerd lacks, or has from an older build, in one stream.

        `podman save` of several images writes their shared layers once, uncompressed
        (compressing is what makes an OCI archive slow), straight into `ctr images import`;
        containerd unpacks only layers it has no snapshot of.
        """
        try:
            loaded: dict[str, str] = json.loads(self.layout.loaded_images.read_text())
        except (OSError, ValueError):
            loaded = {}
        present = self._containerd_images()
        wanted: dict[str, str] = {}
        for name in images.all():
            built = image_id(name)
            if built is None:
                raise LocalStackError(f"image {name} is not built: run `achilles dev build`")
            if loaded.get(name) != built or name not in present:
                wanted[name] = built
        if not wanted:
            return
        started = time.monotonic()
        with tempfile.TemporaryFile() as save_errors:
            save = subprocess.Popen(
                podman_argv("save", "--format", "docker-archive", "--multi-image-archive", *wanted),
                env=podman_env(),
                stdout=subprocess.PIPE,
                stderr=save_errors,
            )
            assert save.stdout is not None
            imported = subprocess.run(
                self.ctr("images", "import", "-"),
                stdin=save.stdout,
                capture_output=True,
                check=False,
            )
            save.stdout.close()
            saved = save.wait()
            save_errors.seek(0)
            save_error = save_errors.read().decode(errors="replace")
        if saved != 0 or imported.returncode != 0:
            raise LocalStackError(
                f"cannot load {', '.join(wanted)} into containerd: "
                f"{save_error.strip() or imported.stderr.decode(errors='replace').strip()}"
            )
        missing = set(wanted) - self._containerd_images()
        if missing:
            raise LocalStackError(f"containerd does not list {', '.join(sorted(missing))}")
        loaded |= wanted
        self.layout.loaded_images.write_text(json.dumps(loaded, indent=2))
        self._forget_older_builds(set(loaded.values()))
        elapsed = time.monotonic() - started
        report(f"containerd: loaded {', '.join(wanted)} in {elapsed:.1f}s")

    def _forget_older_builds(self, current: set[str]) -> None:
        """Drop the id-named records an import leaves of builds no tag points at any more
        (containerd keeps what running containers still use; its GC frees the rest)."""
        stale = [
            name
            for name in self._containerd_images()
            if name.startswith("sha256:") and name.removeprefix("sha256:") not in current
        ]
        if stale:
            subprocess.run(self.ctr("images", "rm", *stale), capture_output=True, check=False)

    def _containerd_images(self) -> set[str]:
        done = subprocess.run(
            self.ctr("images", "list", "--quiet"), capture_output=True, text=True, check=False
        )
        return set(done.stdout.split()) if done.returncode == 0 else set()

    # --- teardown ------------------------------------------------------------------------

    def remove_pods(self) -> int:
        """Stop and remove every pod sandbox through the CRI (containerd must still run)."""
        listed = subprocess.run(
            self.crictl("pods", "--quiet"), capture_output=True, text=True, check=False
        )
        sandboxes = listed.stdout.split() if listed.returncode == 0 else []
        if sandboxes:
            subprocess.run(self.crictl("stopp", *sandboxes), capture_output=True, check=False)
            subprocess.run(
                self.crictl("rmp", "--force", *sandboxes), capture_output=True, check=False
            )
        return len(sandboxes)

    def clean_host(self) -> None:
        """After the components stopped: shims, cgroups, mounts, network, stray files."""
        for shim in host.shims_of(self.layout.containerd_socket):
            stop_group(shim, grace=2.0, what="containerd shim")
        host.remove_cgroups(self.cgroup_root)
        host.unmount_all(self.layout.root)
        network.teardown(self.net)
        host.remove_stray_files(self.layout.pod_logs, self.net.cni_network)

    def leftovers(self) -> list[str]:
        found = [f"containerd shim {s.pid}" for s in host.shims_of(self.layout.containerd_socket)]
        found += [
            f"process {pid} in the node's cgroups"
            for pid in sorted(host.cgroup_processes(self.cgroup_root))
        ]
        found += host.cgroup_leftovers(self.cgroup_root)
        found += [f"mount {p}" for p in host.mounts_under(self.layout.root)]
        found += network.leftovers(self.net)
        found += host.stray_files(self.layout.pod_logs, self.net.cni_network)
        return found
