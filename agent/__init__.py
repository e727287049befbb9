"""The harness side: the reference agent (`run.py`: route once over MCP, then a deepagents agent
over `chat_model.py`, in the workspace `workspace.py` builds from the routed revision) and the
capture proxy (`proxy.py`) that records any harness's model calls.

`run.py` and `workspace.py` are also the serving path the held-out A/B measures through; they
import only the model room (`optimize.models`) and the serving core, never measure, change
control or search (the sandbox reaches them as a `ScriptRunner` passed in)."""
