"""hipbot's languages: English (the source strings) and Simplified Chinese (``zh_CN``).

Strings are marked with ``_()`` (translated now) or ``N_()`` (marked for extraction, translated
where shown) and kept in one gettext catalogue per language, ``hipbot/locale/<locale>/LC_MESSAGES/
hipbot.po``, maintained with Babel's ``pybabel extract/update``. The ``.po`` is compiled in memory
the first time a language is used, so no binary file is committed.

The language of a call is explicit (``gettext(msg, locale)``) or the one of the current context
(``using(locale)``, a ``ContextVar``): each Discord interaction runs in its own task and its handler
thread copies that task's context, so two users' languages never mix.
"""

from __future__ import annotations

import contextlib
import functools
import gettext as _gettext
import io
import os
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path

ENGLISH = "en"
CHINESE = "zh_CN"
LOCALES = (ENGLISH, CHINESE)
DOMAIN = "hipbot"
LOCALE_DIR = Path(__file__).parent / "locale"
ENV_VARS = ("HIPBOT_LANG", "LC_ALL", "LC_MESSAGES", "LANG")

_current: ContextVar[str] = ContextVar("hipbot_locale", default=ENGLISH)


def normalize(tag: str | None) -> str | None:
    """A supported locale for a language tag (``zh-CN``, ``zh_CN.UTF-8``, ``zh-Hans``, ``en-US``,
    ``C``), or None when the tag names another language (or nothing)."""
    if not tag:
        return None
    base = tag.split(".")[0].split("@")[0].replace("-", "_").strip().lower()
    if base in ("c", "posix") or base == "en" or base.startswith("en_"):
        return ENGLISH
    if base in ("zh", "zh_cn", "zh_sg", "zh_hans") or base.startswith("zh_hans"):
        return CHINESE
    return None


def resolve(*candidates: str | None) -> str:
    """The first candidate that is a supported language; English when none is."""
    for tag in candidates:
        found = normalize(tag)
        if found is not None:
            return found
    return ENGLISH


def env_locale(environ: Mapping[str, str] | None = None) -> str:
    """The terminal's language: the first of HIPBOT_LANG, LC_ALL, LC_MESSAGES, LANG that is set
    decides, as the C library reads them (an unsupported language gives English)."""
    env = os.environ if environ is None else environ
    for name in ENV_VARS:
        if env.get(name):
            return resolve(env[name])
    return ENGLISH


@functools.cache
def translations(locale: str) -> _gettext.NullTranslations:
    """The catalogue of ``locale``, compiled from its ``.po`` (fuzzy entries left out)."""
    if locale == ENGLISH:
        return _gettext.NullTranslations()
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    path = LOCALE_DIR / locale / "LC_MESSAGES" / f"{DOMAIN}.po"
    with path.open("rb") as fh:
        catalog = read_po(fh, locale=locale, domain=DOMAIN)
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    buffer.seek(0)
    return _gettext.GNUTranslations(buffer)


def current() -> str:
    return _current.get()


@contextlib.contextmanager
def using(locale: str | None) -> Iterator[str]:
    """Run a block in ``locale`` (a tag, normalized; unsupported or None: English)."""
    chosen = resolve(locale)
    token = _current.set(chosen)
    try:
        yield chosen
    finally:
        _current.reset(token)


def gettext(message: str, locale: str | None = None) -> str:
    return translations(locale or _current.get()).gettext(message)


def ngettext(singular: str, plural: str, n: int, locale: str | None = None) -> str:
    return translations(locale or _current.get()).ngettext(singular, plural, n)


def N_(message: str, /, **values: object) -> Message:  # noqa: N802 (gettext's conventional name)
    """Mark a string for extraction; it is translated where it is shown (``_(row.help)``, or
    ``localized(text)``). With values, the English template is filled in now and again after
    translation: ``N_("{name} needs ROCm {version}", name=name, version="6.2")``."""
    return Message(message, **values)


class Message(str):
    """English text that remembers its catalogue template and values: everywhere a ``str`` is used
    (``--json``, logs, comparisons) it is the English text; :func:`localized` gives it in the
    current language, the values (API names, paths, numbers) filled in after translation. A value
    that is itself a :class:`Message` is localized too."""

    template: str
    values: dict[str, object]

    def __new__(cls, template: str, /, **values: object) -> Message:
        text = super().__new__(cls, template.format(**values) if values else template)
        text.template = template
        text.values = values
        return text

    def localized(self, locale: str | None = None) -> str:
        translated = gettext(self.template, locale)
        if not self.values:
            return translated
        values = {k: v.localized(locale) if isinstance(v, Message) else v for k, v in self.values.items()}
        return translated.format(**values)


class Joined(Message):
    """Texts joined by ``separator`` (a heading and its list of problems), each localized where
    shown: in English it is ``separator.join(parts)``."""

    separator: str
    parts: tuple[str, ...]

    def __new__(cls, separator: str, parts: Iterable[str]) -> Joined:
        parts = tuple(parts)
        text = str.__new__(cls, separator.join(parts))
        text.template, text.values = str(text), {}
        text.separator, text.parts = separator, parts
        return text

    def localized(self, locale: str | None = None) -> str:
        return self.separator.join(localized(p, locale) for p in self.parts)


def localized(text: str, locale: str | None = None) -> str:
    """``text`` in the current language when it is a :class:`Message` (or ``locale``'s); any other
    text (a compiler's message, a path) as it is."""
    return text.localized(locale) if isinstance(text, Message) else text


def columns(text: str) -> int:
    """How many terminal columns ``text`` takes: wide (CJK) characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int) -> str:
    """``text`` followed by spaces up to ``width`` terminal columns, as ``str.ljust`` does for ASCII."""
    return text + " " * max(0, width - columns(text))


_ = gettext
