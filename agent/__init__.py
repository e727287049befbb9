"""The harness side: the reference agent (`run.py`, route once over MCP, then a LangGraph agent
over `chat_model.py`) and the capture proxy (`proxy.py`) that records any harness's model calls.

`run.py` is also the serving path the held-out A/B measures through; it imports only the model
room (`optimize.models`), never change control or search."""
