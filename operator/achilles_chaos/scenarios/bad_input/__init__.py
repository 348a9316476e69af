"""Bad input at every door: malformed custom resources at the API server, resources the API
server accepts but the operator cannot honour, malformed CLI arguments, and model replies
no provider should send. Each must meet a clear error, no crash loop, no corrupted row."""

from achilles_chaos.scenarios.bad_input.scenario import bad_input

__all__ = ["bad_input"]
