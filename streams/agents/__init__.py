"""Agents' side of claimstream: the MCP server (`claimstream mcp`), its tools, and turning a tool's
result into a claim. It reads through a worker's web API and writes claims to the broker, like
any client (`streams.client`); a worker never imports it.

The rooms, from the agent inward: `server` (the MCP wiring and the tools' descriptions), `tools`
(the work, no MCP import), `facts` (what the tools answer: facts, warnings, the plan verdict),
`tool_claims` (a tool's result as a claim). The `mcp` and `get` subcommands are the command
line's (`streams.cli.agents`).
"""
