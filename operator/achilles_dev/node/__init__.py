"""The real node: containerd + runc, kubelet and kube-proxy in a network namespace of their own.

Like a kind node is a container, our node is a network namespace (`network.py`) joined
to the host by a veth pair: the kubelet, containerd and kube-proxy run in it, pods hang
off a CNI bridge inside it, and kube-proxy's iptables rules live in it. The API server
and PostgreSQL listen on the host's end of the veth, which is also what the `kubernetes`
Service points at. Everything else the node owns — its containerd and kubelet
directories, its cgroup subtree, its network namespace — is named after the stack, so
two stacks (a developer's and the test suite's) can each run a node side by side, and
`teardown.py` can remove exactly what one stack made.
"""
