"""Datasets for SFT, read as LLaMA-Factory reads them, and tokenized with the prompt masked out.

A dataset is named in ``dataset_info.json`` (``file_name`` or ``hf_hub_url``, ``formatting`` alpaca
or sharegpt, ``columns``, ``tags``). Each record becomes a list of chat messages; the chat template
(the tokenizer's own, or a named one) renders them, and only the assistant turns carry labels.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipbot.errors import HipbotError

IGNORE_INDEX = -100
FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
# Files under dataset_dir may also be Arrow (what 🤗 datasets writes), as LLaMA-Factory reads them.
LOCAL_FORMATS = {**FILE_FORMATS, ".arrow": "arrow"}
MEDIA_COLUMNS = ("images", "videos", "audios")
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
        # newer LLaMA-Factory names
        "apertus",
        "bailing_v2",
        "cpm4",
        "dots_ocr",
        "ernie",
        "ernie_nothink",
        "ernie_vl",
        "falcon_h1",
        "glm4_5v",
        "glm4v",
        "glmz1",
        "gpt_oss",
        "granite3_vision",
        "hunyuan_small",
        "intern_s1",
        "keye_vl",
        "lfm2",
        "lfm2_vl",
        "ling",
        "llava_next",
        "llava_next_llama3",
        "llava_next_mistral",
        "llava_next_qwen",
        "llava_next_video",
        "llava_next_video_mistral",
        "llava_next_video_yi",
        "llava_next_yi",
        "mimo",
        "mimo_vl",
        "minicpm_o",
        "minicpm_v",
        "moonlight",
        "qwen3_5",
        "qwen3_5_nothink",
        "qwen3_omni",
        "qwen3_omni_nothink",
        "qwen3_vl_nothink",
        "seed_oss",
    ]
)


def known_template(name: str) -> bool:
    """A template named here or by LLaMA-Factory, or a newer name of a model family it knows
    (``qwen3_6``): those select the tokenizer's own chat template, as the family's own names do."""
    names = set(TEMPLATES) | LLAMAFACTORY_TEMPLATES
    families = {m.group() for n in names if (m := re.match(r"[a-z]+", n))}
    family = re.match(r"[a-z]+", name)
    return name in names or (family is not None and family.group() in families)


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


# Where a dataset_info.json entry can point besides a local file; workers reach none of them.
REMOTE_SOURCES = {
    "hf_hub_url": "the Hugging Face Hub",
    "ms_hub_url": "the ModelScope Hub",
    "om_hub_url": "the Modelers Hub",
    "cloud_file_name": "cloud storage",
}
SPLIT_RE = re.compile(r"^\s*(\w+)\s*(?:\[\s*(-?\d+%?)?\s*:\s*(-?\d+%?)?\s*\])?\s*$")


@dataclass(frozen=True)
class DatasetAttr:
    """One ``dataset_info.json`` entry (LLaMA-Factory's data/README.md)."""

    name: str
    file_name: str | None = None
    remote: tuple[str, str] | None = None  # (key, url) of a Hub/cloud source
    script_url: str | None = None
    subset: str | None = None
    split: str = "train"
    num_samples: int | None = None
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
    """The entry for ``name``, refusing what SFT on a worker cannot use (each with the reason)."""
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
    if not isinstance(entry, dict):
        raise HipbotError(f"dataset {name!r}: its dataset_info.json entry must be an object")
    formatting = entry.get("formatting", "alpaca")
    if formatting not in ("alpaca", "sharegpt"):
        raise HipbotError(f"dataset {name!r}: formatting must be alpaca or sharegpt, got {formatting!r}")
    columns = entry.get("columns") or {}
    tags = entry.get("tags") or {}
    if not isinstance(columns, dict) or not isinstance(tags, dict):
        raise HipbotError(f"dataset {name!r}: columns and tags must be objects mapping names to names")
    if entry.get("ranking"):
        raise HipbotError(
            f"dataset {name!r} is a preference dataset (ranking: true, chosen/rejected answers) for reward "
            "modelling or DPO; SFT trains on one answer per prompt: use a dataset without ranking"
        )
    if columns.get("kto_tag"):
        raise HipbotError(
            f"dataset {name!r} has a kto_tag column (KTO feedback data); SFT trains on every answer as "
            "a good one: drop kto_tag from its columns, or pick an SFT dataset"
        )
    media = [c for c in MEDIA_COLUMNS if columns.get(c)]
    if media:
        raise HipbotError(
            f"dataset {name!r} has {'/'.join(media)} columns: workers train text-only LoRA adapters, "
            "multimodal datasets are not supported"
        )
    remote = next(((k, str(entry[k])) for k in REMOTE_SOURCES if entry.get(k)), None)
    if not entry.get("file_name") and remote is None and not entry.get("script_url"):
        raise HipbotError(f"dataset {name!r}: give file_name (a file or folder under dataset_dir)")
    if not entry.get("file_name"):
        _no_local_copy(name, remote, entry.get("script_url"))
    num_samples = entry.get("num_samples")
    if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
        raise HipbotError(
            f"dataset {name!r}: num_samples must be a positive whole number, got {num_samples!r}"
        )
    split = str(entry.get("split") or "train")
    if not SPLIT_RE.match(split):
        raise HipbotError(
            f"dataset {name!r}: split {split!r} is not a split name such as train or train[:1000]"
        )
    return DatasetAttr(
        name=name,
        file_name=entry.get("file_name"),
        remote=remote,
        script_url=entry.get("script_url"),
        subset=entry.get("subset"),
        split=split,
        num_samples=num_samples,
        formatting=formatting,
        columns={k: str(v) for k, v in columns.items() if v},
        tags={k: str(v) for k, v in tags.items() if v},
    )


def _no_local_copy(name: str, remote: tuple[str, str] | None, script_url: str | None) -> None:
    """A dataset only on a hub (or behind a loading script) cannot reach a worker: say what to do."""
    if remote is not None:
        key, url = remote
        raise HipbotError(
            f"dataset {name!r} is on {REMOTE_SOURCES[key]} ({key}: {url}) and workers cannot download "
            "datasets; download it, put its files under dataset_dir and declare file_name, or attach "
            "the file to the job"
        )
    raise HipbotError(
        f"dataset {name!r} is loaded by a script (script_url: {script_url}); workers do not run dataset "
        "scripts: export it to a json/jsonl/csv/parquet file and declare file_name"
    )


def dataset_problems(spec: Any, dataset_dir: Path | str | None = None) -> list[str]:
    """Every problem with the datasets a job names (``dataset`` and ``eval_dataset``): entries that are
    missing or cannot be used, and local files that do not exist; all at once, like the spec's."""
    dataset_dir = Path(dataset_dir or spec.dataset_dir)
    try:
        info = read_dataset_info(dataset_dir)
    except HipbotError as exc:
        return [str(exc)]
    problems = []
    for name in dict.fromkeys([*spec.dataset, *spec.eval_dataset]):
        try:
            attr = dataset_attr(name, info)
            path = dataset_dir / (attr.file_name or "")
            if not path.exists():
                if attr.remote is not None or attr.script_url:
                    _no_local_copy(attr.name, attr.remote, attr.script_url)
                raise HipbotError(f"dataset {name!r}: file {path} does not exist")
        except HipbotError as exc:
            problems.append(str(exc))
    return problems


def _read_file(path: Path) -> list[dict[str, Any]]:
    kind = LOCAL_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise HipbotError(
            f"{path.name}: unsupported dataset file type (use json, jsonl, csv, parquet or arrow)"
        )
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if kind == "arrow":
            import pyarrow as pa

            with pa.memory_map(str(path)) as source:
                try:
                    return pa.ipc.open_stream(source).read_all().to_pylist()
                except pa.ArrowInvalid:  # the file (random access) format rather than a stream
                    return pa.ipc.open_file(source).read_all().to_pylist()
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


def _bound(text: str | None, n: int) -> int | None:
    if not text:
        return None
    if text.endswith("%"):
        return round(n * int(text[:-1]) / 100)
    return int(text)


def select_split(rows: list[dict[str, Any]], attr: DatasetAttr) -> list[dict[str, Any]]:
    """``split`` as 🤗 datasets reads it for a local file: its one split, ``train``, or a slice of it
    (``train[:1000]``, ``train[10%:]``)."""
    match = SPLIT_RE.match(attr.split)
    assert match is not None  # checked by dataset_attr
    split, start, stop = match.groups()
    if split != "train":
        raise HipbotError(
            f"dataset {attr.name!r}: split {split!r} does not exist: a local file has one split, train "
            "(take part of it with a slice such as train[:1000] or train[90%:])"
        )
    return rows[_bound(start, len(rows)) : _bound(stop, len(rows))]


def sample_rows(rows: list[dict[str, Any]], num_samples: int, seed: int) -> list[dict[str, Any]]:
    """LLaMA-Factory's ``num_samples``: a random subset, or every row plus random repeats when larger."""
    import random

    rng = random.Random(seed)
    picked = rng.sample(range(len(rows)), min(num_samples, len(rows)))
    picked += [rng.randrange(len(rows)) for _ in range(num_samples - len(picked))] if rows else []
    return [rows[i] for i in picked]


def load_records(attr: DatasetAttr, dataset_dir: Path | str, seed: int = 42) -> list[dict[str, Any]]:
    """Rows of one dataset from its file (or folder of files) under ``dataset_dir``, after ``split``
    and ``num_samples``; Hub-only datasets cannot reach a worker and say so."""
    path = Path(dataset_dir) / (attr.file_name or "")
    if not attr.file_name or not path.exists():
        if attr.remote is not None or attr.script_url:
            _no_local_copy(attr.name, attr.remote, attr.script_url)
        raise HipbotError(f"dataset {attr.name!r}: file {path} does not exist")
    if path.is_dir():
        files = sorted(c for c in path.rglob("*") if c.is_file() and c.suffix.lower() in LOCAL_FORMATS)
        if any(
            f.suffix.lower() == ".arrow" for f in files
        ):  # a saved 🤗 dataset: its json files are metadata
            files = [f for f in files if f.suffix.lower() == ".arrow"]
        if not files:
            raise HipbotError(
                f"dataset {attr.name!r}: folder {path} holds no json, jsonl, csv, parquet or arrow file"
            )
        rows: list[dict[str, Any]] = []
        for child in files:
            rows.extend(_read_file(child))
    else:
        rows = _read_file(path)
    rows = select_split(rows, attr)
    if attr.num_samples is not None and rows:
        rows = sample_rows(rows, attr.num_samples, seed)
    return rows


def _text(value: Any) -> str:
    """Message content as text: OpenAI's list of parts becomes its text parts."""
    if isinstance(value, list):
        return "".join(
            str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in value if p is not None
        )
    return "" if value is None else str(value)


def _tools_text(tools: Any) -> str:
    if not tools:
        return ""
    text = tools if isinstance(tools, str) else json.dumps(tools, ensure_ascii=False)
    return f"You have access to the following tools:\n{text}"


def _with_system(messages: list[dict[str, str]], system: Any, tools: Any) -> list[dict[str, str]]:
    """The system prompt (and the tool descriptions, as LLaMA-Factory's default tool format puts
    them there) as a leading system message."""
    text = "\n\n".join(t for t in (_text(system), _tools_text(tools)) if t)
    return ([{"role": "system", "content": text}] if text else []) + messages


def to_messages(row: dict[str, Any], attr: DatasetAttr) -> list[dict[str, str]]:
    """One record as chat messages (system?, user, assistant, ...), or [] when it has no answer."""
    if attr.formatting == "alpaca":
        cols = {**ALPACA_COLUMNS, **attr.columns}
        messages: list[dict[str, str]] = []
        for turn in row.get(cols["history"]) or []:
            if isinstance(turn, list | tuple) and len(turn) == 2:
                messages += [
                    {"role": "user", "content": _text(turn[0])},
                    {"role": "assistant", "content": _text(turn[1])},
                ]
        query = [_text(row.get(cols[c])) for c in ("prompt", "query") if row.get(cols[c])]
        response = row.get(cols["response"])
        if response is None or response == "":
            return []
        messages += [
            {"role": "user", "content": "\n".join(query)},
            {"role": "assistant", "content": _text(response)},
        ]
        return _with_system(messages, row.get(cols["system"]), row.get(cols.get("tools", "")))
    cols = {**SHAREGPT_COLUMNS, **attr.columns}
    tags = {**SHAREGPT_TAGS, **attr.tags}
    roles = {
        tags["user_tag"]: "user",
        tags["assistant_tag"]: "assistant",
        tags["observation_tag"]: "user",
        tags["function_tag"]: "assistant",
    }
    turns = row.get(cols["messages"]) or []
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        return []
    system = row.get(cols["system"])
    if turns and turns[0].get(tags["role_tag"]) == tags["system_tag"]:  # the system tag overrides the column
        system, turns = turns[0].get(tags["content_tag"]), turns[1:]
    messages = []
    for turn in turns:
        role = roles.get(turn.get(tags["role_tag"]))
        if role is None:
            return []
        content = turn.get(tags["content_tag"])
        if content in (None, "") and turn.get("tool_calls"):  # OpenAI: an assistant turn calling tools
            calls = [c.get("function", c) for c in turn["tool_calls"] if isinstance(c, dict)]
            content = json.dumps(calls, ensure_ascii=False)
        messages.append({"role": role, "content": _text(content)})
    if not any(m["role"] == "assistant" for m in messages):
        return []
    return _with_system(messages, system, row.get(cols.get("tools", "")))


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


def _render(
    tokenizer: Any, template: str, messages: list[dict[str, str]], gen: bool, options: dict[str, Any]
) -> str:
    return tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=gen, **options
    )


def encode(
    tokenizer: Any,
    messages: list[dict[str, str]],
    template: str,
    cutoff_len: int,
    *,
    train_on_prompt: bool = False,
    mask_history: bool = False,
    template_options: dict[str, Any] | None = None,
) -> dict[str, list[int]] | None:
    """input_ids and labels for one conversation: each assistant turn is a target, the rest -100.

    Segments are the differences between renders of growing prefixes, so any template whose
    render of a prefix is a prefix of the whole works (all named ones, and HF chat templates).
    ``template_options`` go to the template (``enable_thinking`` for reasoning models' templates).
    """
    options = template_options or {}
    boundaries: list[tuple[str, bool]] = []
    done = ""
    last_assistant = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = _render(tokenizer, template, messages[:i], True, options)
        full = _render(tokenizer, template, messages[: i + 1], False, options)
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


def _encode_dataset(
    spec: Any, tokenizer: Any, template: str, attr: DatasetAttr, dataset_dir: Path
) -> tuple[list[dict[str, list[int]]], int]:
    rows = load_records(attr, dataset_dir, seed=spec.seed)
    if spec.max_samples:
        rows = rows[: spec.max_samples]
    thinking = False if (spec.template or "").endswith("_nothink") else spec.enable_thinking
    options = {} if thinking is None else {"enable_thinking": thinking}
    examples, skipped = [], 0
    for row in rows:
        messages = to_messages(row, attr)
        if messages and spec.default_system and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": spec.default_system}, *messages]
        encoded = (
            encode(
                tokenizer,
                messages,
                template,
                spec.cutoff_len,
                train_on_prompt=spec.train_on_prompt,
                mask_history=spec.mask_history,
                template_options=options,
            )
            if messages
            else None
        )
        if encoded is None:
            skipped += 1
        else:
            examples.append(encoded)
    return examples, skipped


def interleave(
    parts: list[list[dict[str, list[int]]]], strategy: str, probs: list[float] | None, seed: int
) -> list[dict[str, list[int]]]:
    """LLaMA-Factory's ``mix_strategy`` (🤗 ``interleave_datasets``): take examples from the datasets in
    turn (or at random by ``interleave_probs``) until the first runs out (``interleave_under``) or
    until every one has run out once, restarting the shorter ones (``interleave_over``)."""
    import random

    if strategy == "concat":
        return [x for part in parts for x in part]
    rng = random.Random(seed)
    live = [i for i, part in enumerate(parts) if part and (probs is None or probs[i] > 0)]
    positions = dict.fromkeys(live, 0)
    exhausted: set[int] = set()
    out: list[dict[str, list[int]]] = []
    turn = 0
    while live:
        if probs is None:
            i = live[turn % len(live)]
            turn += 1
        else:
            i = rng.choices(live, weights=[probs[j] for j in live])[0]
        out.append(parts[i][positions[i]])
        positions[i] += 1
        if positions[i] == len(parts[i]):
            exhausted.add(i)
            positions[i] = 0
            if strategy == "interleave_under" or exhausted.issuperset(live):
                break
    return out


def pack(examples: list[dict[str, list[int]]], cutoff_len: int) -> list[dict[str, list[int]]]:
    """LLaMA-Factory's ``packing``: examples joined into sequences of at most ``cutoff_len`` tokens
    (first-fit, longest first), so a step carries fewer pad tokens."""
    bins: list[dict[str, list[int]]] = []
    for example in sorted(examples, key=lambda x: len(x["input_ids"]), reverse=True):
        n = len(example["input_ids"])
        target = next((b for b in bins if len(b["input_ids"]) + n <= cutoff_len), None)
        if target is None:
            bins.append({"input_ids": list(example["input_ids"]), "labels": list(example["labels"])})
        else:
            target["input_ids"] += example["input_ids"]
            target["labels"] += example["labels"]
    return bins


def build_examples(spec: Any, tokenizer: Any, dataset_dir: Path | str | None = None) -> Examples:
    """Read every dataset named in the spec, tokenize, mask prompts, mix them (``mix_strategy``);
    the eval set is ``eval_dataset`` or a ``val_size`` split; ``packing`` joins training examples."""
    import random

    dataset_dir = Path(dataset_dir or spec.dataset_dir)
    names = [*spec.dataset, *spec.eval_dataset]
    if not (dataset_dir / "dataset_info.json").is_file():
        raise HipbotError(f"dataset {names[0]!r}: no dataset_info.json in {dataset_dir}")
    info = read_dataset_info(dataset_dir)
    template = chat_template(tokenizer, spec.template)
    skipped = 0

    def encoded(name: str) -> list[dict[str, list[int]]]:
        nonlocal skipped
        examples, dropped = _encode_dataset(spec, tokenizer, template, dataset_attr(name, info), dataset_dir)
        skipped += dropped
        return examples

    train = interleave(
        [encoded(n) for n in spec.dataset], spec.mix_strategy, spec.interleave_probs, spec.seed
    )
    evaluation = [x for n in spec.eval_dataset for x in encoded(n)]
    if not train:
        raise HipbotError(
            f"datasets {', '.join(spec.dataset)} gave no training example "
            f"({skipped} records skipped: empty answers, unknown roles, or prompts longer than cutoff_len)"
        )
    if spec.eval_dataset and not evaluation:
        raise HipbotError(f"eval_dataset {', '.join(spec.eval_dataset)} gave no example")
    if spec.val_size:
        n_eval = int(spec.val_size) if spec.val_size >= 1 else int(len(train) * spec.val_size)
        n_eval = min(n_eval, len(train) - 1)
        if n_eval:
            random.Random(spec.seed).shuffle(train)
            train, evaluation = train[n_eval:], train[:n_eval]
    if spec.packing:
        train = pack(train, spec.cutoff_len)
    return Examples(train=train, eval=evaluation, skipped=skipped)
