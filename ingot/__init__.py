"""Ingot: evidence-gated change control and offline routing for agent skills.

The ground floor every package imports: `errors.py` (the one hierarchy), `settings.py` (the one
Settings record), `fsutil.py` (atomic writes), `runtime.py` (settings -> live objects; imports
the core, never a front end). The top floor sits in `cli/` (the `ingot` command) and `bench/`."""

__version__ = "0.1.0"
