"""The harness side: the capture proxy (and, with its issue, the reference agent)."""
