"""Talks to models and records it: `llm.py` (the one client), ledger, cassettes, prompts, traces.

Owns every byte sent to or received from a model. Must not import measure, control or search,
nor any front end: everything model-driven passes through here, so this room depends on nothing."""
