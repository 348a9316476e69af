"""The real node's configuration: names and addresses per stack, the settings the probe found
necessary, the node's identities, and where the image build finds what it needs."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from achilles.errors import LocalStackError
from achilles_dev.base_image import _qualified, debian_mirror
from achilles_dev.config import StackConfig
from achilles_dev.node.configs import (
    NodeLayout,
    cni_conflist,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
)
from achilles_dev.node.network import NodeNetwork, stack_id
from achilles_dev.pki import NodeIdentity, ensure_pki

NET = NodeNetwork(stack_id="0123abcd", index=7)


def test_each_stack_names_its_host_resources_after_its_state_dir(tmp_path: Path) -> None:
    one, two = stack_id(tmp_path / "a"), stack_id(tmp_path / "b")
    assert one != two
    assert stack_id(tmp_path / "a") == one
    assert (NET.netns, NET.host_veth, NET.cni_network) == (
        "achilles-0123abcd",
        "achv0123abcd",
        "achilles-0123abcd",
    )
    assert len(NET.host_veth) <= 15  # IFNAMSIZ
    assert (NET.host_ip, NET.node_ip, NET.pod_cidr) == ("10.213.7.1", "10.213.7.2", "10.214.7.0/24")


def test_a_real_node_stack_serves_and_hands_out_its_veth_address(tmp_path: Path) -> None:
    config = StackConfig(state_dir=tmp_path, node="containerd", network_index=7)
    assert config.apiserver_url == f"https://10.213.7.1:{config.ports.apiserver}"
    assert config.pod_database_url.startswith("postgresql+psycopg://postgres@10.213.7.1:")
    assert config.database_url.startswith("postgresql+psycopg://postgres@127.0.0.1:")
    nodeless = StackConfig(state_dir=tmp_path, node="none")
    assert nodeless.apiserver_url.startswith("https://127.0.0.1:")
    assert nodeless.pod_database_url == nodeless.database_url


def test_recorded_settings_survive_a_reload_and_a_process_node_stack_is_refused(
    tmp_path: Path,
) -> None:
    StackConfig(state_dir=tmp_path, node="containerd", network_index=3).save()
    loaded = StackConfig.load(tmp_path)
    assert (loaded.node, loaded.network_index) == ("containerd", 3)
    # A stack recorded with the removed process node (its kubelet's port among its
    # ports, or no node at all: before the real node existed) is refused, with the way out.
    document = json.loads((tmp_path / "stack.json").read_text())
    document["ports"]["kubelet"] = 16450
    for recorded in ({"node": "process"}, {}):
        del document["node"]
        (tmp_path / "stack.json").write_text(json.dumps({**document, **recorded}))
        with pytest.raises(LocalStackError, match=r"host processes \(`--node process`"):
            StackConfig.load(tmp_path)
        document["node"] = "containerd"
    # The ports of components that are gone are left out, not refused.
    (tmp_path / "stack.json").write_text(json.dumps(document))
    assert StackConfig.load(tmp_path).ports == loaded.ports


def test_kubelet_settings_for_hybrid_cgroup_v1_without_cap_sys_resource(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path / "node")
    config = kubelet_config(
        NET, layout, cgroup_root="/achilles-0123abcd", ca=Path("ca"), cert=Path("c"), key=Path("k")
    )
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["failSwapOn"] is False
    assert config["cgroupRoot"] == "/achilles-0123abcd"
    assert config["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"
    assert config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"] == {"enabled": False}  # type: ignore[index]
    assert config["imageGCHighThresholdPercent"] == 100  # never delete the loaded images
    assert config["evictionHard"]["imagefs.available"] == "0%"  # type: ignore[index]


def test_containerd_runs_runc_under_our_directories(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path / "node")
    document = tomllib.loads(containerd_config(layout, "localhost/achilles/pause:3.10.2"))
    assert document["root"] == str(layout.containerd_root)
    assert document["imports"] == []
    plugins = document["plugins"]
    assert plugins["io.containerd.server.v1.grpc"]["address"] == str(layout.containerd_socket)
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False
    assert runc["Root"] == str(layout.runc_root)
    assert runtime["cni"]["conf_dir"] == str(layout.cni_conf_dir)
    pinned = plugins["io.containerd.cri.v1.images"]["pinned_images"]
    assert pinned["sandbox"] == "localhost/achilles/pause:3.10.2"


def test_pod_network_and_kube_proxy_stay_inside_the_node(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path / "node")
    conflist = cni_conflist(NET, layout)
    bridge = conflist["plugins"][0]  # type: ignore[index]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.214.7.0/24", "gateway": "10.214.7.1"}]]
    assert bridge["ipam"]["dataDir"] == str(layout.cni_ipam_dir)
    proxy = kube_proxy_config(NET, Path("kubeconfig"), "achilles-local")
    assert proxy["mode"] == "iptables"
    assert proxy["clusterCIDR"] == "10.214.7.0/24"
    assert proxy["conntrack"]["maxPerCore"] == 0  # type: ignore[index]


def test_node_identities_and_a_reissue_when_the_address_moves(tmp_path: Path) -> None:
    pki = ensure_pki(
        tmp_path, apiserver_ips=("10.213.7.1",), node=NodeIdentity("achilles-local", "10.213.7.2")
    )
    node = x509.load_pem_x509_certificate(pki.node.cert.read_bytes())
    assert node.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:node:achilles-local"
    )
    assert node.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "system:nodes"
    )
    serving = x509.load_pem_x509_certificate(pki.node_serving.cert.read_bytes())
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.213.7.2")]
    proxy = x509.load_pem_x509_certificate(pki.kube_proxy.cert.read_bytes())
    assert proxy.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:kube-proxy"
    )

    before = pki.apiserver.cert.read_bytes()
    ensure_pki(
        tmp_path, apiserver_ips=("10.213.7.1",), node=NodeIdentity("achilles-local", "10.213.7.2")
    )
    assert pki.apiserver.cert.read_bytes() == before
    ensure_pki(
        tmp_path, apiserver_ips=("10.213.9.1",), node=NodeIdentity("achilles-local", "10.213.9.2")
    )
    moved = x509.load_pem_x509_certificate(pki.apiserver.cert.read_bytes())
    ips = moved.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.213.9.1") in ips.get_values_for_type(x509.IPAddress)


def test_the_base_image_comes_from_the_mirror_apt_uses(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    one_line = tmp_path / "sources.list"
    one_line.write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert debian_mirror([tmp_path / "missing", deb822]) == "http://mirror.example/debian"
    assert debian_mirror([one_line]) == "http://other.example/debian"
    assert debian_mirror([]) == "http://deb.debian.org/debian"


def test_short_image_names_are_qualified_as_docker_does() -> None:
    assert _qualified("python:3.11-slim") == "docker.io/library/python:3.11-slim"
    assert _qualified("bitnami/redis:7") == "docker.io/bitnami/redis:7"
    assert _qualified("ghcr.io/astral-sh/uv:0.13.9") == "ghcr.io/astral-sh/uv:0.13.9"
    assert _qualified("localhost/achilles/x:dev") == "localhost/achilles/x:dev"
