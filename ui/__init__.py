"""The review surface (FastAPI). Until the change-control UI lands it serves a status page only."""
