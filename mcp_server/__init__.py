"""Serving: the skill registry, the offline embedder, the router and the MCP front end."""
