"""Serving: the skill registry, safe file reads, the offline embedder, the router and the library
that keeps them in step, plus the MCP front end (`server.py`).

The serving core imports only the ground floor (`ingot.errors`, `ingot.fsutil`): never change
control, the agent or the UI. `server.py` is the one front end here and may call change control."""
