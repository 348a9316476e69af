"""CRD generation: the pydantic models of `achilles.k8s.resources` -> `crds/*.yaml`.

`openapi` turns a model's JSON schema into the structural schema the API server
accepts; `generate` builds the CustomResourceDefinitions, writes them (and the chart's
copy) and finds drift (`achilles crds generate [--check]`). Build-time only: the
operator never imports this package.
"""
