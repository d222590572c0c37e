"""The chat template a LoRA job trained with, recorded beside the adapter so it is served the same way.

The trainer renders every example with a Jinja chat template (a named one such as ``default`` or
``alpaca``, or the tokenizer's own), plus the job's ``default_system`` and ``enable_thinking``. A
served adapter answers well only when its prompt is rendered exactly so, so the trainer writes
``template_record.json`` into the adapter folder: the template text, the special tokens it refers
to, those two settings, the turn-end marker to stop at, and a probe prompt rendered by the
tokenizer itself. Serving renders prompts from the record with the same sandboxed Jinja set-up as
``transformers``' ``apply_chat_template`` (no tokenizer or ``transformers`` import needed: a chat
request stays cheap), and :meth:`TemplateRecord.check` proves the two renderers agree on the probe.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from hipbot.errors import HipbotError
from hipbot.i18n import N_

if TYPE_CHECKING:
    import jinja2

    from hipbot.jobs.finetune.spec import JobSpec

log = logging.getLogger(__name__)

RECORD_FILE = "template_record.json"
RECORD_FORMAT = 1
PROBE_QUESTION = "What does hipify do to cudaMalloc?"
_MARK = "\x00HIPBOT-ANSWER\x00"


class TemplateError(HipbotError):
    """A template record that is missing pieces, invalid, or cannot reproduce its training prompt."""


class ChatMessage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str


class TemplateRecord(BaseModel):
    """What a job's examples were rendered with (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: int = RECORD_FORMAT
    template: str | None  # the job's ``template:`` as written; None when it named none
    source: Literal["named", "tokenizer", "fallback"]  # ours by name, the tokenizer's own, or 'default'
    chat_template: str
    default_system: str | None = None
    enable_thinking: bool | None = None
    special_tokens: dict[str, str] = {}
    stop: tuple[str, ...] = ()  # what the template writes after an answer (an eos, <|im_end|> ...)
    stop_token_ids: tuple[int, ...] = ()
    probe_prompt: (
        str  # the tokenizer's own rendering of ``conversation(PROBE_QUESTION)`` (generation prompt on)
    )

    @property
    def label(self) -> str:
        """How ``serve list`` names it: ``default``, ``phi4 (tokenizer's)``, ``(tokenizer's)``."""
        if self.source == "named":
            return str(self.template)
        own = "(tokenizer's)" if self.source == "tokenizer" else "(default)"
        return f"{self.template} {own}" if self.template else own

    def template_kwargs(self) -> dict[str, Any]:
        options: dict[str, Any] = dict(self.special_tokens)
        if self.enable_thinking is not None:
            options["enable_thinking"] = self.enable_thinking
        return options

    def conversation(
        self, prompt: str, history: Sequence[ChatMessage] = (), system: str | None = None
    ) -> list[ChatMessage]:
        """The messages as training saw them: ``system`` (else ``default_system``) first unless the
        earlier turns open with their own system turn, then those turns and the prompt."""
        system = system if system is not None else self.default_system
        head = [ChatMessage(role="system", content=system)] if system else []
        if history and history[0].role == "system":
            head = []
        return [*head, *history, ChatMessage(role="user", content=prompt)]

    def render(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
        """The prompt text, rendered as ``apply_chat_template`` renders it (no tokenizer needed)."""
        import jinja2

        plain = [m.model_dump() for m in messages]
        try:
            return _compiled(self.chat_template).render(
                messages=plain, add_generation_prompt=add_generation_prompt, **self.template_kwargs()
            )
        except jinja2.TemplateError as exc:
            raise TemplateError(
                N_("the recorded chat template ({label}) failed to render: {exc}", label=self.label, exc=exc)
            ) from exc

    def check(self) -> TemplateRecord:
        """Raise unless rendering here reproduces the probe prompt the tokenizer rendered in training."""
        mine = self.render(self.conversation(PROBE_QUESTION))
        if mine != self.probe_prompt:
            raise TemplateError(
                N_(
                    "the recorded chat template ({label}) renders differently here than in training",
                    label=self.label,
                ),
                hint=N_(
                    "expected {expected!r}, got {got!r}; re-run the job with a current worker",
                    expected=self.probe_prompt[:120],
                    got=mine[:120],
                ),
            )
        return self

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str, where: str = RECORD_FILE) -> TemplateRecord:
        try:
            record = cls.model_validate_json(text)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '-'}: {e['msg']}" for e in exc.errors())
            raise TemplateError(
                N_("{where} is not a valid template record: {problems}", where=where, problems=problems)
            ) from exc
        if record.format != RECORD_FORMAT:
            raise TemplateError(
                N_(
                    "{where} has record format {record_format}; this hipbot reads format {RECORD_FORMAT}",
                    where=where,
                    record_format=record.format,
                    RECORD_FORMAT=RECORD_FORMAT,
                ),
                hint=N_("upgrade hipbot on this machine"),
            )
        return record


def _thinking(spec: JobSpec) -> bool | None:
    """``enable_thinking`` as the trainer passes it (``*_nothink`` templates switch it off)."""
    return False if (spec.template or "").endswith("_nothink") else spec.enable_thinking


def from_training(spec: JobSpec, tokenizer: Any) -> TemplateRecord:
    """The record of what ``spec`` renders its examples with on ``tokenizer`` (the trainer's own choice
    of template, from ``datasets``), with the probe rendered by the tokenizer itself."""
    from hipbot.jobs.finetune.datasets import TEMPLATES
    from hipbot.jobs.finetune.datasets.tokenise import chat_template

    text = chat_template(tokenizer, spec.template)
    if spec.template in TEMPLATES:
        source = "named"
    elif getattr(tokenizer, "chat_template", None):
        source = "tokenizer"
    else:
        source = "fallback"
    thinking = _thinking(spec)
    options = {} if thinking is None else {"enable_thinking": thinking}
    draft = TemplateRecord(
        template=spec.template,
        source=source,
        chat_template=text,
        default_system=spec.default_system,
        enable_thinking=thinking,
        special_tokens={k: v for k, v in tokenizer.special_tokens_map.items() if isinstance(v, str)},
        probe_prompt="",
    )

    def hf(messages: list[ChatMessage], gen: bool) -> str:
        return tokenizer.apply_chat_template(
            [m.model_dump() for m in messages],
            chat_template=text,
            tokenize=False,
            add_generation_prompt=gen,
            **options,
        )

    question = draft.conversation(PROBE_QUESTION)
    answered = [*question, ChatMessage(role="assistant", content=_MARK)]
    stop = hf(answered, False).rpartition(_MARK)[2].strip()
    stop_ids = tokenizer.convert_tokens_to_ids([stop]) if stop else []
    unk = tokenizer.unk_token_id
    return draft.model_copy(
        update={
            "probe_prompt": hf(question, True),
            "stop": (stop,) if stop else (),
            "stop_token_ids": tuple(i for i in stop_ids if i is not None and i != unk),
        }
    )


def write(folder: Path, record: TemplateRecord) -> Path:
    path = Path(folder) / RECORD_FILE
    path.write_text(record.to_json() + "\n", encoding="utf-8")
    return path


def read(folder: Path) -> TemplateRecord | None:
    """The folder's record, checked; None for an adapter trained before records existed."""
    path = Path(folder) / RECORD_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(N_("cannot read {path}: {exc}", path=path, exc=exc)) from exc
    return TemplateRecord.from_json(text, str(path)).check()


def loads(text: str | None) -> TemplateRecord | None:
    """A record stored as JSON text (the registry's column), or None."""
    return None if text is None else TemplateRecord.from_json(text, "the registry's template record")


def _raise(message: str) -> None:
    import jinja2

    raise jinja2.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> jinja2.Template:
    """The environment ``transformers`` renders chat templates in: sandboxed, ``trim_blocks`` and
    ``lstrip_blocks``, loop controls, its ``tojson``/``raise_exception``/``strftime_now``, and the
    ``{% generation %}`` tag (which marks assistant text and renders it unchanged)."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(N_("the recorded chat template is not valid Jinja: {exc}", exc=exc)) from exc
