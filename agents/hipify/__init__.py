"""agents/hipify."""
