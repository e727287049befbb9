"""Ingot: evidence-gated change control and offline routing for agent skills.

The ground floor every package imports: `errors.py` (the one hierarchy), `settings.py` (the one
Settings record), `fsutil.py` (atomic writes), `home.py` (the state home of a set of roots),
`seal.py` (HMAC seals for cached evidence inputs). Above the core: `runtime.py` (settings -> live
objects), `evaluation.py` (evaluate a change end to end) and `background.py` (the serving
process's inbox, guard and autopilot duties); they import the core, never a front end. The top
floor sits in `cli/` (the `ingot` command) and `bench/`."""

__version__ = "0.1.0"
