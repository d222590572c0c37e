"""The optional model stage: a unit the rules left failing goes to the chat model behind
``HIPBOT_LLM_URL`` with its diagnostics, the lines around them and doc passages from the answers
library. The model answers line edits as JSON; they are applied only when every ``old`` line
matches the file, the unit then compiles, and no other file of the tree includes the edited one
(so nothing else can regress). Otherwise the file is restored, byte for byte."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

import httpx

from hipbot.agents.chat.llm import base_url, served_model
from hipbot.agents.port.compiler import CompileResult, CompileSettings, compile_unit
from hipbot.agents.port.report import Edit, text_diff
from hipbot.agents.port.rules import UnitState
from hipbot.agents.port.tree import read_text, write_text
from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_

log = logging.getLogger(__name__)

SYSTEM = (
    "You repair C++/HIP code so that it compiles with hipcc for an AMD GPU. Answer ONLY a JSON object "
    '{"edits": [{"line": N, "old": "exact current text of line N", "new": "replacement text"}]}. '
    "Change as few lines as possible; never remove functionality."
)
CONTEXT_LINES = 6
MAX_EDITS = 20


@dataclass(frozen=True)
class LineEdit:
    line: int
    old: str
    new: str


def parse_edits(reply: str) -> list[LineEdit]:
    """The edits in a model reply (the first JSON object in it); malformed ones are dropped."""
    m = re.search(r"\{.*\}", reply, re.S)
    if not m:
        return []
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError:
        return []
    edits = []
    for item in data.get("edits", [])[:MAX_EDITS] if isinstance(data, dict) else []:
        if (
            isinstance(item, dict)
            and isinstance(item.get("line"), int)
            and isinstance(item.get("old"), str)
            and isinstance(item.get("new"), str)
        ):
            edits.append(LineEdit(item["line"], item["old"], item["new"]))
    return edits


def apply_edits(text: str, edits: list[LineEdit]) -> str | None:
    """The text with the edits, or None when one does not match its line."""
    lines = text.split("\n")
    for e in edits:
        if not 0 < e.line <= len(lines) or lines[e.line - 1].strip() != e.old.strip():
            return None
        lines[e.line - 1] = e.new
    return "\n".join(lines)


def _included_elsewhere(state: UnitState) -> bool:
    name = state.source.name
    pattern = re.compile(rf'#\s*include\s*[<"][^">]*\b{re.escape(name)}[">]')
    for paths in state.files_by_name.values():
        for p in paths:
            code = p != state.source and p.suffix in (".hip", ".h", ".hpp", ".cuh", ".cpp", ".cu", ".inl")
            if code and pattern.search(read_text(state.root / p)):
                return True
    return False


def try_edits(
    state: UnitState, edits: list[LineEdit], settings: CompileSettings, reason: str
) -> tuple[list[Edit], CompileResult] | None:
    """Apply the model's edits to the unit's own file if it then compiles; else restore it."""
    if not edits or _included_elsewhere(state):
        return None
    path = state.root / state.source
    before = read_text(path)
    after = apply_edits(before, edits)
    if after is None or after == before:
        return None
    write_text(path, after)
    result = compile_unit(state.source, state.root, state.args, settings)
    if not result.ok:
        write_text(path, before)
        log.info("model edit for %s rejected: still %d error(s)", state.source, len(result.errors))
        return None
    diff = text_diff(str(state.source), before, after)
    return [
        Edit(str(state.source), reason, "model, given the diagnostics and doc passages", diff, "model")
    ], result


def _prompt(state: UnitState, result: CompileResult, passages: str) -> str:
    lines = read_text(state.root / state.source).split("\n")
    own = [d for d in result.errors if d.file == str(state.source)][:8]
    shown: set[int] = set()
    for d in own:
        shown.update(range(max(1, d.line - CONTEXT_LINES), min(len(lines), d.line + CONTEXT_LINES) + 1))
    code = "\n".join(f"{n}: {lines[n - 1]}" for n in sorted(shown))
    diags = "\n".join(f"{d.file}:{d.line}:{d.col}: {d.message}" for d in result.errors[:8])
    return f"Diagnostics:\n{diags}\n\nLines of {state.source.name}:\n{code}\n\nDocs:\n{passages}\n"


def _passages(question: str, settings: Settings) -> str:
    from hipbot.agents.docs.answers import ask

    try:
        answer = ask(question, settings, k=3)
    except HipbotError as exc:  # docs not ingested: the model works from the diagnostics alone
        log.info("no doc passages for the repair prompt: %s", exc)
        return "(none)"
    return answer.answer[:2000]


class ModelRepair:
    """Callable for ``pipeline.port``: (unit state, failing result) -> (edits, result) or None."""

    def __init__(self, settings: Settings, compile_settings: CompileSettings) -> None:
        if not settings.llm_url:
            raise HipbotError(
                N_("--llm needs an endpoint"), hint=N_("set HIPBOT_LLM_URL (e.g. http://127.0.0.1:8000/v1)")
            )
        self.settings = settings
        self.compile_settings = compile_settings
        self.url = base_url(settings.llm_url) + "/chat/completions"
        self.model = served_model(settings)

    def ask(self, prompt: str) -> str:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": self.settings.llm_max_tokens,
        }
        try:
            r = httpx.post(
                self.url,
                json=body,
                headers={"Authorization": f"Bearer {self.settings.llm_api_key}"},
                timeout=self.settings.llm_timeout,
            )
            r.raise_for_status()
            return r.json()["choices"][0]["message"]["content"] or ""
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            log.warning("model request failed: %s", exc)
            return ""

    def __call__(self, state: UnitState, result: CompileResult) -> tuple[list[Edit], CompileResult] | None:
        if not any(d.file == str(state.source) for d in result.errors):
            return None  # the model edits the unit's own file only
        first = result.errors[0].message
        prompt = _prompt(state, result, _passages(f"HIP: {first}", self.settings))
        edits = parse_edits(self.ask(prompt))
        return try_edits(state, edits, self.compile_settings, f"model repair of: {first}")


def model_for(settings: Settings, compile_settings: CompileSettings) -> ModelRepair:
    return ModelRepair(settings, compile_settings)
