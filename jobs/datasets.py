"""Datasets for SFT, read as LLaMA-Factory reads them, and tokenized with the prompt masked out.

A dataset is named in ``dataset_info.json`` (``file_name`` or ``hf_hub_url``, ``formatting`` alpaca
or sharegpt, ``columns``, ``tags``). Each record becomes a list of chat messages; the chat template
(the tokenizer's own, or a named one) renders them, and only the assistant turns carry labels.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipbot.errors import HipbotError

IGNORE_INDEX = -100
FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
ATTACHMENT_LIMIT = 64 * 1024 * 1024

# Named templates as Jinja chat templates, so every path goes through ``apply_chat_template``.
TEMPLATES: dict[str, str] = {
    "default": (
        "{% for m in messages %}{% if m.role == 'system' %}System: {{ m.content }}\n"
        "{% elif m.role == 'user' %}Human: {{ m.content }}\n"
        "{% else %}Assistant: {{ m.content }}{{ eos_token }}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}Assistant: {% endif %}"
    ),
    "alpaca": (
        "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n\n"
        "{% elif m.role == 'user' %}### Instruction:\n{{ m.content }}\n\n"
        "{% else %}### Response:\n{{ m.content }}{{ eos_token }}\n\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}### Response:\n{% endif %}"
    ),
    "chatml": (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "qwen": (
        "{% if messages[0].role != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "llama3": (
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
        "{{ m.content }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    ),
    "llama2": (
        "{% for m in messages %}{% if m.role == 'system' %}<<SYS>>\n{{ m.content }}\n<</SYS>>\n\n"
        "{% elif m.role == 'user' %}{{ bos_token }}[INST] {{ m.content }} [/INST]"
        "{% else %} {{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }}[/INST]"
        "{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
    ),
    "empty": "{% for m in messages %}{{ m.content }}{% endfor %}",
}
# LLaMA-Factory's template names that have no Jinja copy here: each reproduces its model family's
# own chat format, which the model's tokenizer carries, so they select the tokenizer's template.
LLAMAFACTORY_TEMPLATES = frozenset(
    [
        "aquila",
        "atom",
        "baichuan",
        "baichuan2",
        "bailing",
        "belle",
        "bluelm",
        "breeze",
        "chatglm2",
        "chatglm3",
        "chatml_de",
        "codegeex2",
        "codegeex4",
        "cohere",
        "cpm",
        "cpm3",
        "dbrx",
        "deepseek",
        "deepseek3",
        "deepseekcoder",
        "deepseekr1",
        "exaone",
        "falcon",
        "fewshot",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3n",
        "glm4",
        "glm4_moe",
        "gpt",
        "granite3",
        "granite4",
        "hunyuan",
        "index",
        "intern",
        "intern2",
        "intern_vl",
        "kimi_vl",
        "llama2_zh",
        "llama4",
        "llava",
        "mllama",
        "ministral",
        "mistral_small",
        "olmo",
        "openchat",
        "openchat-3.6",
        "opencoder",
        "orion",
        "paligemma",
        "phi",
        "phi_small",
        "phi4",
        "phi4_mini",
        "pixtral",
        "qwen2_audio",
        "qwen2_omni",
        "qwen2_vl",
        "qwen3",
        "qwen3_nothink",
        "qwen3_vl",
        "sailor",
        "seed_coder",
        "skywork",
        "skywork_o1",
        "solar",
        "starchat",
        "telechat",
        "telechat2",
        "vicuna",
        "video_llava",
        "xuanyuan",
        "xverse",
        "yayi",
        "yi",
        "yi_vl",
        "yuan",
        "zephyr",
        "ziya",
    ]
)
TEMPLATES["smollm"] = TEMPLATES["chatml"]
TEMPLATES["smollm2"] = TEMPLATES["chatml"]

ALPACA_COLUMNS = {
    "prompt": "instruction",
    "query": "input",
    "response": "output",
    "system": "system",
    "history": "history",
}
SHAREGPT_COLUMNS = {"messages": "conversations", "system": "system"}
SHAREGPT_TAGS = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "system_tag": "system",
    "observation_tag": "observation",
    "function_tag": "function_call",
}


@dataclass(frozen=True)
class DatasetAttr:
    """One ``dataset_info.json`` entry."""

    name: str
    file_name: str | None = None
    hf_hub_url: str | None = None
    subset: str | None = None
    split: str = "train"
    formatting: str = "alpaca"
    columns: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


def read_dataset_info(dataset_dir: Path | str) -> dict[str, Any]:
    path = Path(dataset_dir) / "dataset_info.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise HipbotError(
            f"no dataset_info.json in {dataset_dir}", hint="declare each dataset as LLaMA-Factory does"
        ) from exc
    except (OSError, ValueError) as exc:
        raise HipbotError(f"cannot read {path}: {exc}") from exc
    if not isinstance(info, dict):
        raise HipbotError(f"{path} must map dataset names to entries")
    return info


def dataset_attr(name: str, info: dict[str, Any]) -> DatasetAttr:
    if name not in info:
        import difflib

        close = difflib.get_close_matches(name, list(info), n=1)
        raise HipbotError(
            f"dataset {name!r} is not declared in dataset_info.json"
            + (
                f"; did you mean {close[0]!r}?"
                if close
                else f" (declared: {', '.join(sorted(info)) or 'none'})"
            )
        )
    entry = info[name]
    formatting = entry.get("formatting", "alpaca")
    if formatting not in ("alpaca", "sharegpt"):
        raise HipbotError(f"dataset {name!r}: formatting must be alpaca or sharegpt, got {formatting!r}")
    if not entry.get("file_name") and not entry.get("hf_hub_url"):
        raise HipbotError(f"dataset {name!r}: give file_name (local) or hf_hub_url")
    return DatasetAttr(
        name=name,
        file_name=entry.get("file_name"),
        hf_hub_url=entry.get("hf_hub_url"),
        subset=entry.get("subset"),
        split=entry.get("split", "train"),
        formatting=formatting,
        columns=dict(entry.get("columns") or {}),
        tags=dict(entry.get("tags") or {}),
    )


def _read_file(path: Path) -> list[dict[str, Any]]:
    kind = FILE_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise HipbotError(f"{path.name}: unsupported dataset file type (use json, jsonl, csv or parquet)")
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HipbotError(f"cannot read dataset file {path}: {exc}") from exc
    return parse_records(text, path.name)


def parse_records(text: str, name: str) -> list[dict[str, Any]]:
    """Rows of a json (list), jsonl or csv text."""
    suffix = Path(name).suffix.lower()
    try:
        if suffix == ".csv":
            return list(csv.DictReader(io.StringIO(text)))
        stripped = text.lstrip()
        if stripped.startswith("["):
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (ValueError, csv.Error) as exc:
        raise HipbotError(f"{name}: not valid {suffix.lstrip('.') or 'json'}: {exc}") from exc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise HipbotError(f"{name}: expected a list of records (objects)")
    return rows


def load_records(attr: DatasetAttr, dataset_dir: Path | str) -> list[dict[str, Any]]:
    """Rows of one dataset: local file(s) under ``dataset_dir``, or the Hub by name when online."""
    if attr.file_name:
        path = Path(dataset_dir) / attr.file_name
        if path.is_dir():
            rows: list[dict[str, Any]] = []
            for child in sorted(path.iterdir()):
                if child.suffix.lower() in FILE_FORMATS:
                    rows.extend(_read_file(child))
            return rows
        if not path.is_file():
            raise HipbotError(f"dataset {attr.name!r}: file {path} does not exist")
        return _read_file(path)
    try:
        import datasets
    except ImportError as exc:
        raise HipbotError("loading a dataset from the Hub needs the 'datasets' package") from exc
    try:
        ds = datasets.load_dataset(attr.hf_hub_url, name=attr.subset, split=attr.split)
    except Exception as exc:  # noqa: BLE001 - hub/network errors of every kind become one message
        raise HipbotError(f"cannot load dataset {attr.hf_hub_url!r} from the Hub: {exc}") from exc
    return list(ds)


def to_messages(row: dict[str, Any], attr: DatasetAttr) -> list[dict[str, str]]:
    """One record as chat messages (system?, user, assistant, ...), or [] when it has no answer."""
    if attr.formatting == "alpaca":
        cols = {**ALPACA_COLUMNS, **attr.columns}
        messages: list[dict[str, str]] = []
        system = row.get(cols["system"])
        if system:
            messages.append({"role": "system", "content": str(system)})
        for turn in row.get(cols["history"]) or []:
            if isinstance(turn, list | tuple) and len(turn) == 2:
                messages += [
                    {"role": "user", "content": str(turn[0])},
                    {"role": "assistant", "content": str(turn[1])},
                ]
        prompt = str(row.get(cols["prompt"]) or "")
        query = str(row.get(cols["query"]) or "")
        response = row.get(cols["response"])
        if response is None or (not prompt and not query):
            return []
        content = f"{prompt}\n{query}" if prompt and query else (prompt or query)
        messages += [{"role": "user", "content": content}, {"role": "assistant", "content": str(response)}]
        return messages
    cols = {**SHAREGPT_COLUMNS, **attr.columns}
    tags = {**SHAREGPT_TAGS, **attr.tags}
    roles = {
        tags["user_tag"]: "user",
        tags["assistant_tag"]: "assistant",
        tags["system_tag"]: "system",
        tags["observation_tag"]: "user",
        tags["function_tag"]: "assistant",
    }
    messages = []
    system = row.get(cols["system"])
    if system:
        messages.append({"role": "system", "content": str(system)})
    for turn in row.get(cols["messages"]) or []:
        if not isinstance(turn, dict):
            return []
        role = roles.get(turn.get(tags["role_tag"]))
        if role is None:
            return []
        messages.append({"role": role, "content": str(turn.get(tags["content_tag"], ""))})
    if not any(m["role"] == "assistant" for m in messages):
        return []
    return messages


def guess_formatting(rows: list[dict[str, Any]]) -> str:
    first = rows[0] if rows else {}
    return "sharegpt" if ("conversations" in first or "messages" in first) else "alpaca"


def attachment_entry(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``dataset_info.json`` entry for an attached file, its format read off its first record."""
    entry: dict[str, Any] = {"file_name": name}
    if guess_formatting(rows) == "sharegpt":
        entry["formatting"] = "sharegpt"
        if "messages" in rows[0] and "conversations" not in rows[0]:
            entry["columns"] = {"messages": "messages"}
            entry["tags"] = {
                "role_tag": "role",
                "content_tag": "content",
                "user_tag": "user",
                "assistant_tag": "assistant",
                "system_tag": "system",
            }
    return entry


def check_attachment(data: bytes, name: str, spec: Any = None) -> list[dict[str, Any]]:
    """Validate an uploaded dataset file: size, type, records that make at least one training example."""
    if len(data) > ATTACHMENT_LIMIT:
        raise HipbotError(
            f"attached dataset {name} is {len(data) / 2**20:.1f} MiB; the limit is {ATTACHMENT_LIMIT // 2**20} MiB"
        )
    suffix = Path(name).suffix.lower()
    if suffix not in FILE_FORMATS:
        raise HipbotError(f"attached dataset {name}: use a .json, .jsonl, .csv or .parquet file")
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(pa.BufferReader(data)).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a bad file
            raise HipbotError(f"attached dataset {name}: not a readable parquet file ({exc})") from exc
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HipbotError(f"attached dataset {name}: not UTF-8 text") from exc
        rows = parse_records(text, name)
    if not rows:
        raise HipbotError(f"attached dataset {name} has no records")
    attr = dataset_attr(Path(name).stem, {Path(name).stem: attachment_entry(name, rows)})
    if not any(to_messages(r, attr) for r in rows[:50]):
        raise HipbotError(
            f"attached dataset {name}: no record has a prompt and an answer "
            "(alpaca: instruction/input/output; sharegpt: conversations with from/value)"
        )
    return rows


# --------------------------------------------------------------------------------------- tokenizing


def chat_template(tokenizer: Any, template: str | None) -> str:
    """The Jinja template to render with: one of ours by name; for LLaMA-Factory's other names
    (which reproduce a model family's own format) or none, the tokenizer's own; else 'default'."""
    if template in TEMPLATES:
        return TEMPLATES[template]
    return getattr(tokenizer, "chat_template", None) or TEMPLATES["default"]


def _render(tokenizer: Any, template: str, messages: list[dict[str, str]], gen: bool) -> str:
    return tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=gen
    )


def encode(
    tokenizer: Any,
    messages: list[dict[str, str]],
    template: str,
    cutoff_len: int,
    *,
    train_on_prompt: bool = False,
    mask_history: bool = False,
) -> dict[str, list[int]] | None:
    """input_ids and labels for one conversation: each assistant turn is a target, the rest -100.

    Segments are the differences between renders of growing prefixes, so any template whose
    render of a prefix is a prefix of the whole works (all named ones, and HF chat templates).
    """
    boundaries: list[tuple[str, bool]] = []
    done = ""
    last_assistant = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = _render(tokenizer, template, messages[:i], True)
        full = _render(tokenizer, template, messages[: i + 1], False)
        if not prompt.startswith(done):
            prompt = done + prompt[len(_common_prefix(done, prompt)) :]
        if not full.startswith(prompt):
            full = prompt + full[len(_common_prefix(prompt, full)) :]
        target = train_on_prompt or not mask_history or i == last_assistant
        boundaries.append((prompt[len(done) :], train_on_prompt))
        boundaries.append((full[len(prompt) :], target))
        done = full
    input_ids: list[int] = []
    labels: list[int] = []
    for text, is_target in boundaries:
        if not text:
            continue
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        input_ids += ids
        labels += ids if is_target else [IGNORE_INDEX] * len(ids)
    input_ids, labels = input_ids[:cutoff_len], labels[:cutoff_len]
    if all(label == IGNORE_INDEX for label in labels):
        return None
    return {"input_ids": input_ids, "labels": labels}


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


@dataclass
class Examples:
    train: list[dict[str, list[int]]]
    eval: list[dict[str, list[int]]]
    skipped: int


def build_examples(spec: Any, tokenizer: Any, dataset_dir: Path | str | None = None) -> Examples:
    """Read every dataset named in the spec, tokenize, mask prompts; split off ``val_size``."""
    import random

    dataset_dir = Path(dataset_dir or spec.dataset_dir)
    names = list(spec.dataset)
    local_info = (dataset_dir / "dataset_info.json").is_file()
    info = read_dataset_info(dataset_dir) if local_info else {}
    template = chat_template(tokenizer, spec.template)
    examples: list[dict[str, list[int]]] = []
    skipped = 0
    for name in names:
        if not local_info:
            raise HipbotError(f"dataset {name!r}: no dataset_info.json in {dataset_dir}")
        attr = dataset_attr(name, info)
        rows = load_records(attr, dataset_dir)
        if spec.max_samples:
            rows = rows[: spec.max_samples]
        for row in rows:
            messages = to_messages(row, attr)
            encoded = (
                encode(
                    tokenizer,
                    messages,
                    template,
                    spec.cutoff_len,
                    train_on_prompt=spec.train_on_prompt,
                    mask_history=spec.mask_history,
                )
                if messages
                else None
            )
            if encoded is None:
                skipped += 1
            else:
                examples.append(encoded)
    if not examples:
        raise HipbotError(
            f"datasets {', '.join(names)} gave no training example "
            f"({skipped} records skipped: empty answers, unknown roles, or prompts longer than cutoff_len)"
        )
    n_eval = 0
    if spec.val_size:
        n_eval = int(spec.val_size) if spec.val_size >= 1 else int(len(examples) * spec.val_size)
        n_eval = min(n_eval, len(examples) - 1)
    if n_eval:
        random.Random(spec.seed).shuffle(examples)
    return Examples(train=examples[n_eval:], eval=examples[:n_eval], skipped=skipped)
