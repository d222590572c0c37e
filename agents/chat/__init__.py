"""agents/chat."""
