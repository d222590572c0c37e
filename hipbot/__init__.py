"""hipbot: chat-ops assistant for moving CUDA code and LLM work onto AMD GPUs.

The folders ``agents``, ``jobs``, ``bot`` and ``prompts`` install as ``hipbot.agents`` and so on;
this package holds what they share: settings, the SQLite database and the CLI entry.
"""

__version__ = "0.1.0"
