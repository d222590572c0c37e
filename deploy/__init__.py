"""Operator files; only the DeepSpeed presets are packaged (the trainer reads them by name)."""
