"""agents/docs."""
