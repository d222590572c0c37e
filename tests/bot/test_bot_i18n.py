"""The bot's languages: the zh_CN catalogue covers every marked string, languages are chosen as the
README says, the command tree carries the zh-CN localizations, and the console speaks HIPBOT_LANG."""

from __future__ import annotations

from pathlib import Path

import discord
import pytest
import regex
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po

from hipbot import i18n
from hipbot.bot.console import Console
from hipbot.bot.discord_app import HipBot
from hipbot.bot.discord_commands import Translator, command_tree_json
from hipbot.bot.state import BotState
from hipbot.config import load_settings

ROOT = Path(__file__).resolve().parents[2]
DISCORD_NAME = regex.compile(r"^[-_\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$")  # Discord's own pattern
BRACES = __import__("re").compile(r"\{[^{}]*\}")


def _marked_strings() -> set[str]:
    """Every string marked in the sources named by babel.cfg (and the CLI's --help texts), as
    ``pybabel extract`` reads them."""
    with (i18n.LOCALE_DIR / "babel.cfg").open() as fh:
        method_map, options_map = parse_mapping_cfg(fh)
    found: set[str] = set()
    for _path, _line, message, _comments, _context in extract_from_dir(str(ROOT), method_map, options_map):
        found.add(message[0] if isinstance(message, tuple) else message)
    return found


def test_every_marked_string_is_translated_in_zh_cn() -> None:
    marked = _marked_strings()
    assert len(marked) > 300 and "Try to make it compile" in marked and "Convert to HIP" in marked
    assert {"question", "job_id", "compiled after translation", "no votes yet", "NAME"} <= marked
    assert {"New or empty output folder.", "Show this message and exit.", "Usage:"} <= marked  # --help
    assert "Show the registered vLLM servers." in marked  # a command's docstring
    po = i18n.LOCALE_DIR / i18n.CHINESE / "LC_MESSAGES" / f"{i18n.DOMAIN}.po"
    with po.open("rb") as fh:
        catalog = read_po(fh)
    translated = {}
    for message in catalog:
        key = message.id[0] if isinstance(message.id, tuple) else message.id
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        if key and not message.fuzzy and all(strings):
            translated[key] = strings
    missing = sorted(marked - set(translated))
    assert not missing, f"not translated in {po.name} (run pybabel update, then translate): {missing}"
    for key in marked:  # a translation keeps the placeholders its code fills in
        for text in translated[key]:
            assert sorted(BRACES.findall(text)) == sorted(BRACES.findall(key)), (key, text)


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (("zh-CN",), "zh_CN"),
        (("zh_CN.UTF-8",), "zh_CN"),
        (("en-US", "zh_CN"), "en"),
        (("fr", "zh_CN"), "zh_CN"),  # a language the bot does not speak: the server's
        (("fr", ""), "en"),
        ((None, None), "en"),
    ],
)
def test_resolve(tags: tuple[str | None, ...], expected: str) -> None:
    assert i18n.resolve(*tags) == expected


def test_env_locale_reads_hipbot_lang_then_lc_all_then_lang() -> None:
    assert i18n.env_locale({"HIPBOT_LANG": "zh_CN", "LANG": "en_US.UTF-8"}) == "zh_CN"
    assert i18n.env_locale({"LC_ALL": "C.UTF-8", "LANG": "zh_CN.UTF-8"}) == "en"
    assert i18n.env_locale({"LANG": "zh_CN.UTF-8"}) == "zh_CN"
    assert i18n.env_locale({}) == "en"


def test_contexts_keep_their_own_language() -> None:
    with i18n.using("zh-CN"):
        assert i18n._("Helpful") == "有帮助"
        with i18n.using("en"):
            assert i18n._("Helpful") == "Helpful"
        assert i18n.gettext("Helpful", "en") == "Helpful"
    assert i18n.current() == "en"


async def test_command_tree_carries_zh_cn_localizations(tmp_path: Path) -> None:
    bot = HipBot(load_settings(), state=BotState.open(tmp_path / "b.db"))
    tree = {c["name"]: c for c in await command_tree_json(bot)}
    for name, command in tree.items():
        if command["type"] == 1:
            assert command["description_localizations"]["zh-CN"] != command["description"], name
            assert list(command["description_localizations"]) == ["zh-CN"]
        for option in command.get("options", []):
            if option.get("description"):
                assert option["description_localizations"]["zh-CN"], (name, option["name"])
    assert tree["Convert to HIP"]["name_localizations"]["zh-CN"] == "转换为 HIP"
    assert tree["ask"]["description_localizations"]["zh-CN"].startswith("根据 HIP 文档")
    scope = {c["name"]: c for c in tree["jobs"]["options"][0]["choices"]}
    assert scope["mine"]["name_localizations"]["zh-CN"] == "我的"


def _sibling_lists(items: list[dict], where: str) -> list[tuple[str, list[dict]]]:
    """The command tree's lists of siblings: the commands, then each one's options, and the options
    of its sub-commands and groups (option types 1 and 2)."""
    lists = [(where, items)]
    for item in items:  # a slash command is type 1 too
        if item["type"] in (1, 2) and "options" in item:
            lists += _sibling_lists(item["options"], f"{where} {item['name']}")
    return lists


async def test_localized_names_follow_discords_rules(tmp_path: Path) -> None:
    bot = HipBot(load_settings(), state=BotState.open(tmp_path / "b.db"))
    tree = await command_tree_json(bot)
    slash = [c for c in tree if c["type"] == 1]
    localized = 0
    for where, siblings in _sibling_lists(slash, "commands"):
        shown = [s.get("name_localizations", {}).get("zh-CN", s["name"]) for s in siblings]
        assert len(set(shown)) == len(shown), (where, shown)  # unique among siblings
        for name in shown:
            assert DISCORD_NAME.match(name) and name == name.lower(), (where, name)
        localized += sum("zh-CN" in s.get("name_localizations", {}) for s in siblings)
    options = sum(len(c.get("options", [])) for c in slash)
    assert localized == len(slash) + options - 1  # all but /hipify, a tool's name kept as it is
    by_name = {c["name"]: c for c in slash}
    assert by_name["ask"]["name_localizations"] == {"zh-CN": "提问"}
    assert "zh-CN" not in by_name["hipify"].get("name_localizations", {})
    ask = {o["name"]: o["name_localizations"]["zh-CN"] for o in by_name["ask"]["options"]}
    assert ask == {"question": "问题", "thread": "子区"}  # the JSON's own names stay English


async def test_a_name_translation_discord_would_refuse_keeps_the_english_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("hipbot.bot.discord_commands.gettext", lambda message, locale: "Job Id")
    where = discord.app_commands.TranslationContextLocation
    translate = Translator().translate
    text = discord.app_commands.locale_str("job_id")
    for location in (where.command_name, where.group_name, where.parameter_name):
        context = discord.app_commands.TranslationContext(location, data=None)
        assert await translate(text, discord.Locale.chinese, context) is None
    context = discord.app_commands.TranslationContext(where.parameter_description, data=None)
    assert await translate(text, discord.Locale.chinese, context) == "Job Id"


def _console(tmp_path: Path, locale: str) -> tuple[Console, list[str]]:
    out: list[str] = []
    settings = load_settings()
    console = Console(
        settings=settings,
        state=BotState.open(tmp_path / f"{locale}.db"),
        write=out.append,
        out_dir=tmp_path,
        locale=i18n.resolve(locale),
    )
    return console, out


def test_console_speaks_its_language_and_keeps_ids(tmp_path: Path) -> None:
    code = (
        "__global__ void k(int* p) { if (threadIdx.x % 32 == 0) p[0] = __shfl_down_sync(0xffffffff, 1, 16); }"
    )
    outputs = {}
    for locale in ("en", "zh_CN"):
        console, out = _console(tmp_path, locale)
        console.handle(f"/hipify {code}")
        console.handle("/job x")
        outputs[locale] = out
    en, zh = ("\n".join(outputs[k]) for k in ("en", "zh_CN"))
    assert "hipify report" in en and "hipify 报告" in zh and "hipify report" not in zh
    assert "error: 'x' is not a job id" in en and "错误：'x' 不是任务编号" in zh
    for rule in sorted(set(__import__("re").findall(r"AMD\d{3}", en))):
        assert rule in zh  # rule ids are never translated
    assert "AMD001" in en and "assumes 32 lanes" in en
    assert "假定一个 warp 有 32 个 lane" in zh and "__shfl_down_sync 收到 32 位掩码 0xffffffff" in zh
    assert len(outputs["en"]) == len(outputs["zh_CN"])


def test_config_language_takes_the_languages_the_bot_speaks(tmp_path: Path) -> None:
    console, out = _console(tmp_path, "en")
    console.handle("/config language=fr")
    assert out[-1].startswith("error: the bot does not speak 'fr'") and "zh_CN" in out[-1]
    console.handle("/config language=zh-CN")
    assert "- Language: 简体中文" in out[-1]


def test_cli_errors_in_the_terminals_language(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from hipbot.cli import main

    monkeypatch.delenv("DISCORD_TOKEN", raising=False)
    monkeypatch.setenv("HIPBOT_LANG", "zh_CN")
    assert main(["discord", "run"]) == 1
    assert "错误：未设置 Discord 机器人令牌" in capsys.readouterr().err
    assert i18n.current() == "en"  # the language was the command's, not the process's for good
