"""The runs resource: `GET /v1/runs` (the caller's runs, newest first, in keyset pages),
`GET /v1/runs/{id}` (one run with its output and what it used), `GET /v1/runs/{id}/steps`
(its steps) and `POST /v1/runs/{id}/cancel`. `endpoints` parse and answer, `schemas` are
the documents, `auth` says who may cancel whose run."""

from achilles.api.runs.endpoints import router

__all__ = ["router"]
