"""The agents resource: `GET /v1/agents` (the caller's agents, as `kubectl get agents`
shows them) and `POST /v1/agents/{namespace}/{name}/runs` (a manual run, as `achilles
run-now` asks). `endpoints` parse and answer, `schemas` are the documents, `auth` says
who may act on whose agent."""

from achilles.api.agents.endpoints import router

__all__ = ["router"]
