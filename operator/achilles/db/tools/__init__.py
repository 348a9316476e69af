"""The tool catalogue's MCP sources and the approvals of their calls (issue 38)."""
