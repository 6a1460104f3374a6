"""Agents' side of claimstream: the MCP server (`claimstream mcp`), its tools, and turning a tool's
result into a claim. It reads through a worker's web API and writes claims to the broker, like
any client (`streams.client`); a worker never imports it."""
