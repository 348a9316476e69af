"""The people's door: the authenticated HTTP API (and, when configured, the web inbox).

An entry-point layer beside the kopf handlers (`achilles.cli > achilles.handlers |
achilles.api > achilles.services`): routers parse a request, learn who is calling
(`achilles.api.identity`), and call the same services the CLI uses, so every rule has
one home. `achilles.api.app.create_app` builds the application; `achilles api` runs it.
"""
