"""Datasets for SFT, read as LLaMA-Factory reads them, and tokenized with the prompt masked out.

A dataset is named in ``dataset_info.json`` (``file_name`` or ``hf_hub_url``, ``formatting`` alpaca
or sharegpt, ``columns``, ``tags``). Each record becomes a list of chat messages; the chat template
(the tokenizer's own, or a named one) renders them, and only the assistant turns carry labels.

- ``read``: dataset_info.json entries, files and folders, splits, num_samples.
- ``convert``: records to chat messages; checking an attached file.
- ``templates``: chat templates by name.
- ``tokenise``: encoding with masks, mixing, the validation split, packing.
"""

from hipbot.jobs.finetune.datasets.convert import attachment_entry, check_attachment, to_messages
from hipbot.jobs.finetune.datasets.read import (
    ATTACHMENT_LIMIT,
    DatasetAttr,
    dataset_attr,
    dataset_problems,
    load_records,
    read_dataset_info,
)
from hipbot.jobs.finetune.datasets.templates import LLAMAFACTORY_TEMPLATES, TEMPLATES, known_template
from hipbot.jobs.finetune.datasets.tokenise import (
    IGNORE_INDEX,
    Examples,
    build_examples,
    encode,
    interleave,
    pack,
)

__all__ = [
    "ATTACHMENT_LIMIT",
    "IGNORE_INDEX",
    "LLAMAFACTORY_TEMPLATES",
    "TEMPLATES",
    "DatasetAttr",
    "Examples",
    "attachment_entry",
    "build_examples",
    "check_attachment",
    "dataset_attr",
    "dataset_problems",
    "encode",
    "interleave",
    "known_template",
    "load_records",
    "pack",
    "read_dataset_info",
    "to_messages",
]
