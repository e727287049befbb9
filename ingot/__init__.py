"""Ingot: evidence-gated change control and offline routing for agent skills.

This package holds only what every front end shares: settings, the error hierarchy and the CLI.
The serving core lives in `mcp_server/`, change control in `optimize/`."""

__version__ = "0.1.0"
