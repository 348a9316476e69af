"""`python -m achilles.local.kubelet`."""

from achilles.local.kubelet.main import main

main()
