"""The operator's kopf handlers (one module per concern) and its cluster-wide loops.

Importing this package registers every handler with kopf; `achilles operator` runs them.
"""

from achilles.handlers import agents, catalogue, operator

__all__ = ["agents", "catalogue", "operator"]
