"""Who is calling: OIDC bearer tokens (people), Kubernetes ServiceAccount tokens (the
portal, acting for a person only where RBAC lets it impersonate them), the web session;
never a plain header. `caller.current_caller` is the one dependency routers use."""
