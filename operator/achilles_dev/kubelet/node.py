"""The Node the stand-in registers and keeps Ready.

A real kubelet posts its Node with capacity and a Ready condition; the API server's
TaintNodesByCondition admission adds a `not-ready` taint at creation, which the node
lifecycle controller would lift. That controller does not run here, so the stand-in
lifts it itself once the node reports Ready.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from achilles_dev.kubelet.status import HOST_IP, now
from achilles_dev.versions import load_versions

DEFAULT_MAX_PODS = 110


def _memory_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return 0


def _arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def node_labels(name: str) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": _arch(),
        "node.achilles.dev/process-runtime": "true",
    }


def node_status(max_pods: int, endpoint_port: int) -> dict[str, Any]:
    capacity = {
        "cpu": str(os.cpu_count() or 1),
        "memory": f"{_memory_kib()}Ki",
        "pods": str(max_pods),
    }
    stamp = now()

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    return {
        # Where the API server reaches the stand-in's endpoint (for `kubectl logs`).
        "daemonEndpoints": {"kubeletEndpoint": {"Port": endpoint_port}},
        "capacity": capacity,
        "allocatable": capacity,
        "addresses": [
            {"type": "InternalIP", "address": HOST_IP},
            {"type": "Hostname", "address": platform.node() or "localhost"},
        ],
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "stand-in"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "stand-in"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "stand-in"),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "achilles kubelet stand-in runs pods as local processes",
            ),
        ],
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": platform.release(),
            "osImage": "achilles local host",
            "containerRuntimeVersion": "achilles-process://1",
            "kubeletVersion": f"{load_versions().kubernetes}-achilles-standin",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": _arch(),
        },
    }


def node_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels(name)},
    }
