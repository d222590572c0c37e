"""The bot's commands as plain functions: inputs in, a ``Reply`` out (or a ``HipbotError``).

Discord and the console both call these; neither holds logic of its own. One module per feature
(``ask``, ``hipify``, ``jobs``, ``serve``, ``admin``; ``messages`` for mentions and buttons,
``common`` for the ``Context``). Each handler calls the same library functions as the CLI
(translator, answers, job queue, adapter registry), imported lazily so that a front end starts
without loading torch or the embedding model. Handlers are synchronous and may be slow (retrieval,
translation, SQLite): the Discord layer runs them in a thread.
"""

from hipbot.bot.handlers.admin import config, ingest, workers
from hipbot.bot.handlers.ask import SOURCES_SHOWN, answer_reply, ask, more_sources, vote, warm_up
from hipbot.bot.handlers.common import Context, safe
from hipbot.bot.handlers.hipify import (
    CODE_EXTENSIONS,
    MAX_CODE_BYTES,
    check_code_filename,
    convert_message,
    extract_code_blocks,
    hipify,
)
from hipbot.bot.handlers.jobs import (
    JobUpdate,
    build_job_yaml,
    cancel,
    finetune,
    job,
    job_choices,
    job_status,
    jobs,
    state_name,
)
from hipbot.bot.handlers.messages import mention, press
from hipbot.bot.handlers.serve import chat, model_choices, model_names, models, publish

__all__ = [
    "CODE_EXTENSIONS",
    "MAX_CODE_BYTES",
    "SOURCES_SHOWN",
    "Context",
    "JobUpdate",
    "answer_reply",
    "ask",
    "build_job_yaml",
    "cancel",
    "chat",
    "check_code_filename",
    "config",
    "convert_message",
    "extract_code_blocks",
    "finetune",
    "hipify",
    "ingest",
    "job",
    "job_choices",
    "job_status",
    "jobs",
    "mention",
    "model_choices",
    "model_names",
    "models",
    "more_sources",
    "press",
    "publish",
    "safe",
    "state_name",
    "vote",
    "warm_up",
    "workers",
]
