"""The one home of the `mcp` SDK: listing and calling an MCP server's tools (issue 38)."""
