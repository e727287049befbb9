"""Benchmarks behind `ingot bench ...` (top floor): each returns a JSON-ready dict.

They build what they measure from settings through `ingot.runtime` and call the core; nothing
in the core or the front ends imports them."""
