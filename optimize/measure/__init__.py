"""Produces evidence and never decides: task sets, judges, held-out A/B, sandboxed checks, mining.

May use `models/`, the serving core (`mcp_server`) and the reference agent (`agent.run`, its
serving path). Must not import `control/` or `search/`: a measurement cannot depend on a verdict."""
