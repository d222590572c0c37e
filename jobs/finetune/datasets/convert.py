"""Converting records to chat messages: alpaca and sharegpt (custom columns and tags, OpenAI-style
messages, a leading system turn, tools written into the system prompt); checking an attached file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune.datasets.read import (
    ATTACHMENT_LIMIT,
    FILE_FORMATS,
    DatasetAttr,
    Record,
    dataset_attr,
    parse_records,
)

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


def to_messages(row: Record, attr: DatasetAttr) -> list[dict[str, str]]:
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


def guess_formatting(rows: list[Record]) -> str:
    first = rows[0] if rows else {}
    return "sharegpt" if ("conversations" in first or "messages" in first) else "alpaca"


def attachment_entry(name: str, rows: list[Record]) -> dict[str, Any]:
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


def check_attachment(data: bytes, name: str) -> list[Record]:
    """Validate an uploaded dataset file: size, type, records that make at least one training example."""
    if len(data) > ATTACHMENT_LIMIT:
        raise HipbotError(
            N_(
                "attached dataset {name} is {size_mib:.1f} MiB; the limit is {limit_mib} MiB",
                name=name,
                size_mib=len(data) / 2**20,
                limit_mib=ATTACHMENT_LIMIT // 2**20,
            )
        )
    suffix = Path(name).suffix.lower()
    if suffix not in FILE_FORMATS:
        raise HipbotError(
            N_("attached dataset {name}: use a .json, .jsonl, .csv or .parquet file", name=name)
        )
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(pa.BufferReader(data)).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a bad file
            raise HipbotError(
                N_("attached dataset {name}: not a readable parquet file ({exc})", name=name, exc=exc)
            ) from exc
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HipbotError(N_("attached dataset {name}: not UTF-8 text", name=name)) from exc
        rows = parse_records(text, name)
    if not rows:
        raise HipbotError(N_("attached dataset {name} has no records", name=name))
    attr = dataset_attr(Path(name).stem, {Path(name).stem: attachment_entry(name, rows)})
    if not any(to_messages(r, attr) for r in rows[:50]):
        raise HipbotError(
            N_(
                "attached dataset {name}: no record has a prompt and an answer (alpaca: "
                "instruction/input/output; sharegpt: conversations with from/value)",
                name=name,
            )
        )
    return rows
