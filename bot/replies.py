"""What a command answers, independent of the front end that shows it.

Handlers return a ``Reply``; the Discord layer turns it into messages, embeds, files and buttons,
the console prints ``Reply.to_text()``. Discord's size limits are applied here (``fit``), once,
so that every front end and every test sees the same split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from hipbot.i18n import _, localized

# Discord's documented limits (https://discord.com/developers/docs/resources/message).
MESSAGE_LIMIT = 2000
EMBED_TITLE_LIMIT = 256
EMBED_DESCRIPTION_LIMIT = 4096
EMBED_FIELDS_LIMIT = 25
FIELD_NAME_LIMIT = 256
FIELD_VALUE_LIMIT = 1024
FOOTER_LIMIT = 2048
EMBED_TOTAL_LIMIT = 6000
EMBEDS_PER_MESSAGE = 10
FILES_PER_MESSAGE = 10
BUTTONS_PER_MESSAGE = 25
BUTTON_LABEL_LIMIT = 80
CUSTOM_ID_LIMIT = 100
DEFAULT_FILE_LIMIT = 10 * 1024 * 1024  # what a guild without boosts accepts; interactions tell the real one

# Code longer than this goes out as a file: a message must keep room for the fences and a line of text.
INLINE_CODE_LIMIT = 1800

_FENCE_RE = re.compile(r"^```([\w+#.-]*)\s*$")


@dataclass
class Field:
    name: str
    value: str
    inline: bool = False


@dataclass
class Link:
    label: str
    url: str


@dataclass
class Embed:
    """An embed as data: a title, a description, fields and links (rendered as markdown links)."""

    title: str = ""
    description: str = ""
    url: str | None = None
    fields: list[Field] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    footer: str = ""
    color: int | None = None
    image: str | None = None  # the name of an attachment shown inside the embed

    def links_markdown(self) -> str:
        return "\n".join(f"[{link.label}]({link.url})" if link.url else link.label for link in self.links)

    def size(self) -> int:
        return (
            len(self.title)
            + len(self.description)
            + len(self.footer)
            + sum(len(f.name) + len(f.value) for f in self.fields)
        )


@dataclass
class Attachment:
    name: str
    data: bytes
    description: str = ""


@dataclass
class Button:
    """A button; ``custom_id`` carries what the click means (e.g. ``hipbot:vote:up:12``)."""

    custom_id: str
    label: str
    style: str = "secondary"  # primary | secondary | success | danger
    emoji: str | None = None
    disabled: bool = False


@dataclass
class Reply:
    text: str = ""
    embeds: list[Embed] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    buttons: list[Button] = field(default_factory=list)
    ephemeral: bool = False
    # Facts for the front end, never shown: e.g. {"answer_id": 12} or {"job_id": "..."}.
    meta: dict[str, Any] = field(default_factory=dict)

    def to_text(self) -> str:
        """The reply as plain text, for the console and for logs: the same content, nothing dropped."""
        parts: list[str] = []
        if self.text:
            parts.append(self.text.rstrip())
        for embed in self.embeds:
            lines = []
            if embed.title:
                lines.append(f"## {embed.title}" + (f"  <{embed.url}>" if embed.url else ""))
            if embed.description:
                lines.append(embed.description)
            for f in embed.fields:
                lines.append(f"- {f.name}: {f.value}")
            for link in embed.links:
                lines.append(f"  [{link.label}] {link.url}" if link.url else f"  {link.label}")
            if embed.image:
                lines.append(f"(image: {embed.image})")
            if embed.footer:
                lines.append(embed.footer)
            parts.append("\n".join(lines))
        for att in self.attachments:
            parts.append(
                _("[attachment {name}, {size}]").format(name=att.name, size=_human_size(len(att.data)))
            )
        if self.buttons:
            parts.append("  ".join(f"[{b.label}]" for b in self.buttons if not b.disabled))
        return "\n\n".join(p for p in parts if p)

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "ephemeral": self.ephemeral,
            "embeds": [
                {
                    "title": e.title,
                    "description": e.description,
                    "url": e.url,
                    "fields": [{"name": f.name, "value": f.value, "inline": f.inline} for f in e.fields],
                    "links": [{"label": link.label, "url": link.url} for link in e.links],
                    "footer": e.footer,
                    "image": e.image,
                }
                for e in self.embeds
            ],
            "attachments": [{"name": a.name, "size": len(a.data)} for a in self.attachments],
            "buttons": [{"custom_id": b.custom_id, "label": b.label} for b in self.buttons],
        }


def error_reply(message: str, hint: str | None = None) -> Reply:
    """Errors are private to the user who caused them and say what to do next (a ``Message`` in the
    current language)."""
    text = f"⚠️ {localized(message)}"
    if hint:
        text += f"\n💡 {localized(hint)}"
    return Reply(text=text, ephemeral=True)


def _human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


def truncate(text: str, limit: int, marker: str = "…") -> str:
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker


def code_block(code: str, lang: str = "cpp") -> str:
    # A ``` inside the code would close the fence early; a zero-width space keeps it visible and inert.
    safe = code.replace("```", "`\u200b``")
    body = safe.rstrip().lstrip("\n")  # leading blank lines only push the code down
    return f"```{lang}\n{body}\n```"


def code_reply_parts(code: str, filename: str, lang: str = "cpp") -> tuple[str, list[Attachment]]:
    """Short code inline in a fenced block, long code as an attached file: (text, attachments).
    Code holding bytes that are not UTF-8 (kept as lone surrogates, see ``hipify.tree.check_text``)
    always goes as a file, written back byte for byte: a message could not carry them."""
    raw = not code.isascii() and any("\udc80" <= ch <= "\udcff" for ch in code)
    if not raw and len(code) <= INLINE_CODE_LIMIT and code.count("\n") < 120:
        return code_block(code, lang), []
    return "", [Attachment(filename, code.encode("utf-8", "surrogateescape"))]


def split_text(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split on line boundaries into chunks of at most ``limit``; an open code fence is closed at the
    end of a chunk and reopened with the same language in the next, so every chunk renders."""
    if len(text) <= limit:
        return [text] if text else []
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    fence: str | None = None  # language of the fence open at the current point, "" for a bare ```
    reserve = 4  # room for the closing "\n```"

    def flush() -> None:
        nonlocal current, size
        body = "\n".join(current)
        if fence is not None:
            body += "\n```"
        chunks.append(body)
        current = [f"```{fence}"] if fence is not None else []
        size = len(current[0]) + 1 if current else 0

    for raw in text.split("\n"):
        pieces = [raw]
        budget = limit - reserve - len(f"```{fence or ''}") - 2
        if len(raw) > budget:  # a single line longer than a message: hard-wrap it
            pieces = [raw[i : i + budget] for i in range(0, len(raw), budget)]
        for line in pieces:
            if current and size + len(line) + 1 > limit - reserve:
                flush()
            current.append(line)
            size += len(line) + 1
            match = _FENCE_RE.match(line.strip())
            if match:
                fence = match.group(1) if fence is None else None
    if current and any(part.strip() for part in current):
        body = "\n".join(current)
        chunks.append(body)
    return chunks


def _fit_embed(embed: Embed) -> list[Embed]:
    """One embed within the per-embed limits; more than 25 fields continue in follow-on embeds."""
    description = embed.description
    if embed.links:
        links = embed.links_markdown()
        description = f"{description}\n\n{links}" if description else links
    base = replace(
        embed,
        title=truncate(embed.title, EMBED_TITLE_LIMIT),
        description=truncate(description, EMBED_DESCRIPTION_LIMIT),
        footer=truncate(embed.footer, FOOTER_LIMIT),
        links=[],
        fields=[],
    )
    fields = [
        Field(
            truncate(f.name, FIELD_NAME_LIMIT) or "\u200b",
            truncate(f.value, FIELD_VALUE_LIMIT) or "\u200b",
            f.inline,
        )
        for f in embed.fields
    ]
    out = [replace(base, fields=fields[:EMBED_FIELDS_LIMIT])]
    rest = fields[EMBED_FIELDS_LIMIT:]
    while rest:
        out.append(
            Embed(
                title=truncate(_("{title} (continued)").format(title=embed.title), EMBED_TITLE_LIMIT),
                fields=rest[:EMBED_FIELDS_LIMIT],
                color=embed.color,
            )
        )
        rest = rest[EMBED_FIELDS_LIMIT:]
    # The 6000-character total per embed: drop trailing fields into another embed if needed.
    fitted: list[Embed] = []
    for e in out:
        while e.size() > EMBED_TOTAL_LIMIT and e.fields:
            overflow: list[Field] = []
            while e.size() > EMBED_TOTAL_LIMIT and e.fields:
                overflow.insert(0, e.fields.pop())
            fitted.append(e)
            e = Embed(
                title=truncate(_("{title} (continued)").format(title=embed.title), EMBED_TITLE_LIMIT),
                fields=overflow,
            )
        fitted.append(e)
    return fitted


def fit(reply: Reply, file_limit: int = DEFAULT_FILE_LIMIT) -> list[Reply]:
    """Split a reply into messages that Discord accepts.

    Text over 2000 characters is split (code fences kept balanced), embeds are cut to their limits
    and spread so that one message carries at most 10 embeds and 6000 embed characters, files over
    ``file_limit`` are replaced by a note saying so, and buttons ride on the last message.
    """
    notes: list[str] = []
    attachments: list[Attachment] = []
    for att in reply.attachments:
        if len(att.data) > file_limit:
            notes.append(
                _(
                    "(`{name}` is {size}, over this server's upload limit of {limit}; "
                    "run `hipbot` locally to get it)"
                ).format(name=att.name, size=_human_size(len(att.data)), limit=_human_size(file_limit))
            )
        else:
            attachments.append(att)
    text = reply.text
    if notes:
        text = (text + "\n" if text else "") + "\n".join(notes)

    messages: list[Reply] = [Reply(text=chunk, ephemeral=reply.ephemeral) for chunk in split_text(text)]
    if not messages:
        messages.append(Reply(ephemeral=reply.ephemeral))

    embeds = [piece for embed in reply.embeds for piece in _fit_embed(embed)]
    target = messages[-1]
    total = 0
    for embed in embeds:
        if len(target.embeds) >= EMBEDS_PER_MESSAGE or total + embed.size() > EMBED_TOTAL_LIMIT:
            target = Reply(ephemeral=reply.ephemeral)
            messages.append(target)
            total = 0
        target.embeds.append(embed)
        total += embed.size()

    for i in range(0, len(attachments), FILES_PER_MESSAGE):
        batch = attachments[i : i + FILES_PER_MESSAGE]
        if i == 0 and not messages[-1].attachments:
            messages[-1].attachments.extend(batch)
        else:
            messages.append(Reply(attachments=list(batch), ephemeral=reply.ephemeral))

    messages[-1].buttons = [
        replace(b, label=truncate(b.label, BUTTON_LABEL_LIMIT), custom_id=b.custom_id[:CUSTOM_ID_LIMIT])
        for b in reply.buttons[:BUTTONS_PER_MESSAGE]
    ]
    return messages
