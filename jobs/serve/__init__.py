"""jobs/serve."""
