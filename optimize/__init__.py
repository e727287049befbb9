"""Reserved for a later issue; see ARCHITECTURE.md."""
