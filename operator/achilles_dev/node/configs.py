"""Where the real node keeps its state, and the configuration of each of its components.

Every path is under `<state dir>/node/`, so a stack's node never shares a file with
another stack's (containerd's root and state, runc's state, the kubelet's root and pod
logs, the CNI configuration and IP allocations). The settings are the ones the
feasibility probe found to work on a VM with hybrid cgroup v1 and no CAP_SYS_RESOURCE:

* kubelet: `failCgroupV1: false`, `cgroupDriver: cgroupfs`, `failSwapOn: false`, pods
  under a cgroup subtree of the stack's own (`cgroupRoot`), eviction and image GC
  thresholds that a nearly full developer disk does not trip.
* containerd: runc from the distribution (`SystemdCgroup = false`, its state under ours),
  `restrict_oom_score_adj` (the VM refuses negative scores), the sandbox image pinned to
  the locally built pause image, CNI configuration and plugins of our own.
* kube-proxy: iptables mode inside the node's namespace, no conntrack sysctls (only the
  initial namespace may set them).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from achilles.errors import LocalStackError
from achilles_dev.node.network import BRIDGE, NodeNetwork

KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_HEALTHZ_PORT = 10256
CONTAINERD_NAMESPACE = "k8s.io"
CNI_PLUGIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
_RUNC_CANDIDATES = (
    "/usr/sbin/runc",
    "/usr/bin/runc",
    "/usr/local/sbin/runc",
    "/usr/local/bin/runc",
)


@dataclass(frozen=True)
class NodeLayout:
    """The files and directories of one stack's node."""

    root: Path  # <state dir>/node

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.root / "runc"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.yaml"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "kube-proxy-config.yaml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def loaded_images(self) -> Path:
        """Which podman image id each image name had when it was loaded into containerd."""
        return self.root / "loaded-images.json"

    def runtime_endpoint(self) -> str:
        return f"unix://{self.containerd_socket}"


def runc_binary() -> str:
    for candidate in _RUNC_CANDIDATES:
        if Path(candidate).exists():
            return candidate
    found = shutil.which("runc")
    if found is None:
        raise LocalStackError("runc is needed for the real node: apt-get install runc")
    return found


def cni_plugin_dir() -> str:
    for candidate in CNI_PLUGIN_DIRS:
        if (Path(candidate) / "bridge").exists():
            return candidate
    raise LocalStackError(
        "the CNI plugins (bridge, host-local, loopback) are needed for the real node: "
        "apt-get install containernetworking-plugins"
    )


def _toml_string(value: str | Path) -> str:
    return json.dumps(str(value))  # a TOML basic string is a JSON string for these paths


def containerd_config(layout: NodeLayout, pause_image: str) -> str:
    q = _toml_string
    return f"""\
# Written by achilles_dev.node; rewritten on every `achilles dev up`.
version = 4
root = {q(layout.containerd_root)}
state = {q(layout.containerd_state)}
imports = []
oom_score = 0

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = {q(layout.containerd_socket)}

  [plugins.'io.containerd.server.v1.ttrpc']
    address = {q(f"{layout.containerd_socket}.ttrpc")}

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = {q(pause_image)}

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    enable_cdi = false
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = {q(runc_binary())}
          Root = {q(layout.runc_root)}
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [{q(cni_plugin_dir())}]
      conf_dir = {q(layout.cni_conf_dir)}
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'

  [plugins.'io.containerd.internal.v1.opt']
    path = {q(layout.root / "containerd" / "opt")}

  [plugins.'io.containerd.nri.v1.nri']
    disable = true
"""


def cni_conflist(net: NodeNetwork, layout: NodeLayout) -> dict[str, object]:
    gateway = net.pod_cidr.rsplit(".", 1)[0] + ".1"
    return {
        "cniVersion": "1.0.0",
        "name": net.cni_network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(layout.cni_ipam_dir),
                    "ranges": [[{"subnet": net.pod_cidr, "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(
    net: NodeNetwork, layout: NodeLayout, *, cgroup_root: str, ca: Path, cert: Path, key: Path
) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": net.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": net.node_ip,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": layout.runtime_endpoint(),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "podLogsDir": str(layout.pod_logs),
        "volumePluginDir": str(layout.kubelet_root / "volume-plugins"),
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": "cluster.local",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "serializeImagePulls": False,
        # A developer's disk may be nearly full: never evict pods or delete the node's
        # images for it (image GC at 100% is off), only for memory.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "1m",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "shutdownGracePeriod": "0s",
    }


def kube_proxy_config(net: NodeNetwork, kubeconfig: Path, node_name: str) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "mode": "iptables",
        "clusterCIDR": net.pod_cidr,
        "healthzBindAddress": f"{net.node_ip}:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": "127.0.0.1:10249",
        # Conntrack sysctls belong to the initial namespace: leave them alone.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"syncPeriod": "30s", "minSyncPeriod": "1s"},
    }


def write_configs(
    net: NodeNetwork,
    layout: NodeLayout,
    *,
    pause_image: str,
    kubelet: dict[str, object],
    kube_proxy: dict[str, object],
) -> None:
    for directory in (
        layout.containerd_root,
        layout.containerd_state,
        layout.runc_root,
        layout.kubelet_root,
        layout.pod_logs,
        layout.cni_conf_dir,
        layout.cni_ipam_dir,
    ):
        directory.mkdir(parents=True, exist_ok=True)
    layout.containerd_config.write_text(containerd_config(layout, pause_image))
    for stale in layout.cni_conf_dir.glob("*"):
        stale.unlink()
    (layout.cni_conf_dir / "10-achilles.conflist").write_text(
        json.dumps(cni_conflist(net, layout), indent=2)
    )
    layout.kubelet_config.write_text(yaml.safe_dump(kubelet, sort_keys=False))
    layout.kube_proxy_config.write_text(yaml.safe_dump(kube_proxy, sort_keys=False))
