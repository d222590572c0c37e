"""/hipify and "Convert to HIP": CUDA to HIP with the translator, its report and AMD lints."""

from __future__ import annotations

import re
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from hipbot.bot.handlers.common import COLOR_FAIL, COLOR_OK, COLOR_WARN, Context
from hipbot.bot.replies import Attachment, Button, Embed, Field, Reply, code_reply_parts, truncate
from hipbot.errors import HipbotError
from hipbot.i18n import N_, Joined, _, localized, ngettext

if TYPE_CHECKING:
    from hipbot.agents.hipify.compile_check import CheckResult
    from hipbot.agents.hipify.lints import Lint

CODE_EXTENSIONS = (".cu", ".cuh", ".cpp", ".h", ".hpp", ".cc", ".cxx", ".c", ".hip")
MAX_CODE_BYTES = 1024 * 1024
# A stranger's code is translated in linear time; this bounds it anyway (1 MiB takes about 1 s).
TRANSLATE_SECONDS = 10.0

# ```lang\n ... ``` with any (or no) language tag; the closing fence may end the message.
_BLOCK_RE = re.compile(r"```[ \t]*([\w+#.-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
# Lint severities as the report shows them (the JSON keeps the English word).
SEVERITIES = {"error": N_("error"), "warning": N_("warning"), "info": N_("info")}
# Why an identifier was left as it was (hipify's own words in the JSON).
REASONS = {"unsupported": N_("unsupported"), "experimental": N_("experimental"), "unknown": N_("unknown")}
_CUDA_HINT_RE = re.compile(r"\b(cuda\w*|__global__|__device__|__shared__|cublas\w*|curand\w*|cufft\w*)\b|<<<")


def _decode_code(data: bytes, name: str) -> str:
    if len(data) > MAX_CODE_BYTES:
        raise HipbotError(
            _("{name} is {size} KiB; the bot converts files up to {limit} KiB").format(
                name=name, size=len(data) // 1024, limit=MAX_CODE_BYTES // 1024
            ),
            hint=_("run `hipbot hipify FILE` locally for big files"),
        )
    from hipbot.agents.hipify.translate import check_text

    return check_text(data, name)


def check_code_filename(name: str) -> None:
    if not name.lower().endswith(CODE_EXTENSIONS):
        raise HipbotError(
            _("{name!r} is not a source file the bot converts").format(name=name),
            hint=_("attach a {extensions} file, or paste the code in the code option").format(
                extensions=", ".join(CODE_EXTENSIONS[:4])
            ),
        )


def _output_name(name: str) -> str:
    """The translation's file name, as ``hipbot hipify --o-dir`` names it: ``x.cu`` -> ``x.hip``,
    other sources and headers keep their name."""
    from hipbot.agents.hipify.tree import output_path

    return output_path(Path(PurePath(name).name), None, Path(), False).name


def hipify(
    ctx: Context,
    code: str | None = None,
    *,
    attachment: tuple[str, bytes] | None = None,
    arch: str | None = None,
    filename: str | None = None,
) -> Reply:
    """Translate CUDA to HIP: the code inline or as a file, the report as an embed, optionally compiled."""
    if attachment is not None:
        name, data = attachment
        check_code_filename(name)
        code = _decode_code(data, name)
        filename = name
    if code is None or not code.strip():
        raise HipbotError(
            _("there is no code to convert"), hint=_("paste CUDA in the code option or attach a .cu file")
        )
    ctx.check_cooldown("hipify")
    return _translate_reply(ctx, code, filename or "snippet.cu", arch)


def _translate_reply(ctx: Context, code: str, filename: str, arch: str | None) -> Reply:
    from hipbot.agents.hipify import translate as translator

    result = translator.translate(
        code, translator.HipifyOptions(), filename=filename, time_limit=TRANSLATE_SECONDS
    )
    if result.report.errors:
        raise HipbotError(Joined("; ", result.report.errors), hint=_("send CUDA C++ source text"))
    out_name = _output_name(filename)
    text, files = code_reply_parts(result.text, out_name)
    lints = [_localized_lint(lint) for lint in result.lints]
    embeds = [_report_embed(result.report.to_dict(), lints, out_name)]
    buttons = []
    if arch:
        from hipbot.agents.hipify import compile_check

        check = compile_check.check(result.text, arch)
        embeds.append(_compile_embed(check, arch))
        if not check.ok and check.diagnostics:
            from hipbot.agents.port.snippet import remember

            key = remember(code, ctx.settings.home)
            target = arch.split(":")[0]  # a button id carries no ':xnack+' features
            buttons.append(Button(f"hipbot:port:{key}:{target}", _("Try to make it compile"), emoji="🔧"))
    return Reply(text=text, embeds=embeds, attachments=files, buttons=buttons, meta={"hip": result.text})


def port_snippet(ctx: Context, key: str, arch: str) -> Reply:
    """The "Try to make it compile" button: the snippet through ``hipbot port``'s repair loop."""
    from hipbot.agents.hipify.compile_check import ARCH_RE
    from hipbot.agents.port import snippet

    if not ARCH_RE.match(arch):
        raise HipbotError(_("{arch!r} is not an AMD GPU target").format(arch=arch), hint=_("e.g. gfx90a"))
    code = snippet.recall(key, ctx.settings.home)
    ctx.check_cooldown("hipify")
    result = snippet.port_snippet(code, arch)
    if result.compiled:
        verdict = (
            ngettext(
                "compiles for {arch} after {n} repair",
                "compiles for {arch} after {n} repairs",
                len(result.edits),
            ).format(arch=arch, n=len(result.edits))
            if result.edits
            else _("compiles for {arch} as translated").format(arch=arch)
        )
    else:
        verdict = _("still does not compile for {arch}: {cause}").format(
            arch=arch, cause=localized(result.cause) if result.cause else _("see the errors")
        )
    fields = [
        Field(e.rule, truncate(f"{localized(e.reason)}\n{e.doc}".strip(), 1024)) for e in result.edits[:10]
    ]
    if not result.compiled and result.errors:
        fields.append(Field("hipcc", truncate("```\n" + "\n".join(result.errors[:8]) + "\n```", 1024)))
    embed = Embed(
        title=_("port: {verdict}").format(verdict=verdict)[:256],
        fields=fields,
        color=COLOR_OK if result.compiled else COLOR_FAIL,
    )
    text, files = code_reply_parts(result.text, "snippet.hip")
    for name, header in result.headers.items():
        files.append(Attachment(name.replace("/", "_"), header.encode("utf-8", "surrogateescape")))
    if result.diff:
        files.append(Attachment("repairs.diff", result.diff.encode("utf-8", "surrogateescape")))
    return Reply(text=text, embeds=[embed], attachments=files)


def _localized_lint(lint: Lint) -> dict[str, Any]:
    message, hint = lint.localized()
    return {**lint.to_dict(), "message": message, "hint": hint}


def _report_embed(report: dict[str, Any], lints: list[dict[str, Any]], name: str) -> Embed:
    """hipify's statistics, the identifiers left unconverted (with why) and the AMD lints."""
    fields = []
    by_api = report.get("converted_by_api") or {}
    if by_api:
        fields.append(Field(_("Converted"), ", ".join(f"{api}: {n}" for api, n in by_api.items())))
    unconverted = report.get("unconverted") or []
    if unconverted:
        lines = [
            f"`{u['name']}` {u['line']}:{u['col']} — {_(REASONS.get(u['reason'], u['reason']))}"
            for u in unconverted[:15]
        ]
        if len(unconverted) > 15:
            lines.append(
                _("… and {n} more (`hipbot hipify --json` lists all)").format(n=len(unconverted) - 15)
            )
        fields.append(Field(_("Not converted ({n})").format(n=len(unconverted)), "\n".join(lines)))
    for lint in lints[:10]:
        where = _("line {line}").format(line=lint.get("line")) if lint.get("line") else ""
        body = lint.get("message", "")
        if lint.get("hint"):
            body += f"\n💡 {lint['hint']}"
        severity = SEVERITIES.get(lint.get("severity", "warning"), lint.get("severity", ""))
        fields.append(Field(f"{_(severity)} {lint.get('id', '')} {where}".strip(), body))
    if len(lints) > 10:
        fields.append(
            Field(_("More lints"), _("{n} more; `hipbot hipify FILE` shows all").format(n=len(lints) - 10))
        )
    description = _(
        "{converted} CUDA references converted ({percent} %), {left} left, {launches} kernel launches, "
        "{lints} AMD lints."
    ).format(
        converted=report.get("converted_refs", 0),
        percent=report.get("conversion_percent", 100),
        left=len(unconverted),
        launches=report.get("kernel_launches", 0),
        lints=len(lints),
    )
    return Embed(
        title=truncate(_("hipify report: {name}").format(name=name), 256),
        description=description,
        fields=fields,
        color=COLOR_WARN if (unconverted or lints) else COLOR_OK,
    )


def _compile_embed(check: CheckResult, arch: str) -> Embed:
    """hipcc's verdict (run in its sandbox) and the diagnostics on the snippet's own lines."""
    ok = check.ok
    diags = check.diagnostics
    lines = [f"{d.line}:{d.col} {d.severity}: {d.message}" for d in diags[:15]]
    description = _("compiles cleanly") if ok else (check.error or _("{n} diagnostics").format(n=len(diags)))
    return Embed(
        title=f"hipcc --offload-arch={arch}",
        description=truncate(description + ("\n```\n" + "\n".join(lines) + "\n```" if lines else ""), 4096),
        color=COLOR_OK if ok else COLOR_FAIL,
    )


def extract_code_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, code) for every fenced block, whatever its tag (```cuda, ```cpp, ```c++, ```)."""
    return [(lang.lower(), body) for lang, body in _BLOCK_RE.findall(text or "") if body.strip()]


def convert_message(ctx: Context, content: str, attachments: list[tuple[str, bytes]] | None = None) -> Reply:
    """ "Convert to HIP" on a message: its code blocks (any tag), else its code attachments, else its text
    when the text itself is CUDA."""
    blocks = extract_code_blocks(content)
    if blocks:
        code = "\n\n".join(body.rstrip() for _, body in blocks)
        return hipify(ctx, code, filename="message.cu")
    files = [(n, d) for n, d in attachments or [] if n.lower().endswith(CODE_EXTENSIONS)]
    if files:
        return hipify(ctx, attachment=files[0])
    if content and _CUDA_HINT_RE.search(content):
        return hipify(ctx, content, filename="message.cu")
    raise HipbotError(
        _("that message has no code block or source attachment to convert"),
        hint=_("use it on a message with a ```cuda block, or run /hipify with the code"),
    )
