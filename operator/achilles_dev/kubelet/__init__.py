"""A stand-in for the kubelet that runs each pod's containers as local processes.

There is no container runtime on the development machine, so this node agent registers
a Ready Node, binds the pending pods of the namespaces it serves (there is no
kube-scheduler either), and runs each container's `command`/`args` on the host with
the pod's environment resolved. It reports status the way a kubelet does, so the real
Job controller, quota and garbage collector work unchanged on top of it. Images are
ignored: a pod's command must be runnable on this host.
"""
