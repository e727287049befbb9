"""Produces evidence and never decides: task sets, judges, held-out A/B on distinct samples and
its statistics, routing impact, sealed caches, sandboxed checks (bubblewrap or docker), mining,
every cell of a change (`evaluate.py`), and regression replay (goldens, replay, drift, cascade).

May use `models/`, the serving core (`mcp_server`) and the reference agent (`agent.run`, its
serving path). Must not import `control/` or `search/`: a measurement cannot depend on a verdict."""
