"""Prompt templates, kept as files so they can be read and edited without touching code."""

from importlib import resources


def load(name: str) -> str:
    """Return the text of prompt template ``name`` (a file in this folder)."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
