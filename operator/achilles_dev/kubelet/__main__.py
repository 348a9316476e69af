"""`python -m achilles_dev.kubelet`."""

from achilles_dev.kubelet.main import main

main()
