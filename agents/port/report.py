"""What ``hipbot port`` reports: per unit where it compiled (after translation, after the rules,
after the model) or why it still fails, every edit beyond translation as a diff with its reason and
doc source, and the summary table. ``to_dict`` is the ``--json`` shape the issue fixes."""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field

from hipbot.i18n import _, localized, ngettext, pad

STAGES = ("translation", "rules", "model")


@dataclass(frozen=True)
class Edit:
    file: str  # relative to OUT ("" for a compiler flag)
    reason: str
    doc: str  # the doc or table the fix rests on
    diff: str  # unified diff, or "+ FLAG" for an added compiler flag
    rule: str

    def to_dict(self) -> dict:
        return asdict(self)


def text_diff(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=1
        )
    )


@dataclass(frozen=True)
class Cause:
    kind: str  # "library", "no-hip-equivalent", "rocm-version", "inline-ptx", "refused", "timeout", "error"
    text: str  # in words a porter understands (a Message: English, localized where shown)


@dataclass
class UnitReport:
    source: str  # relative to SRC
    output: str  # relative to OUT
    status: str = "failed"  # "compiled" | "failed"
    stage: str = "translation"
    cause: Cause | None = None
    command: list[str] = field(default_factory=list)
    cwd: str = ""
    edits: list[Edit] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the first hipcc errors still standing
    rounds: int = 0

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "output": self.output,
            "status": self.status,
            "stage": self.stage,
            "cause": self.cause.text if self.cause else None,
            "cause_kind": self.cause.kind if self.cause else None,
            "command": self.command,
            "cwd": self.cwd,
            "edits": [e.to_dict() for e in self.edits],
            "errors": self.errors,
            "rounds": self.rounds,
        }


@dataclass
class BuildFileReport:
    path: str  # relative to OUT
    kind: str
    edits: list[dict]


@dataclass
class PortReport:
    src: str
    out: str
    arch: str
    rocm: str
    units: list[UnitReport] = field(default_factory=list)
    build_files: list[BuildFileReport] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)  # translated sources: path, encoding, errors
    seconds_port: float = 0.0  # everything but hipcc
    seconds_hipcc: float = 0.0
    model: str | None = None  # "off" | the model's name

    def count(self, stage: str) -> int:
        return sum(u.status == "compiled" and u.stage == stage for u in self.units)

    def summary(self) -> dict:
        causes: dict[str, int] = {}
        for u in self.units:
            if u.status == "failed" and u.cause:
                causes[u.cause.kind] = causes.get(u.cause.kind, 0) + 1
        after_translation = self.count("translation")
        after_rules = after_translation + self.count("rules")
        return {
            "units": len(self.units),
            "compiled_after_translation": after_translation,
            "compiled_after_rules": after_rules,
            "compiled_after_model": after_rules + self.count("model"),
            "failed": sum(u.status == "failed" for u in self.units),
            "causes": causes,
            "arch": self.arch,
            "rocm": self.rocm,
            "model": self.model or "off",
            "build_files": len(self.build_files),
            "seconds_port": round(self.seconds_port, 3),
            "seconds_hipcc": round(self.seconds_hipcc, 3),
        }

    def to_dict(self) -> dict:
        return {
            "units": [u.to_dict() for u in self.units],
            "summary": self.summary(),
            "build_files": [asdict(b) for b in self.build_files],
            "files": self.files,
        }

    def table(self) -> str:
        """The summary for people, in the current language (``to_dict`` is never translated)."""
        s = self.summary()
        n = s["units"] or 1
        rows = [
            (_("compiled after translation"), s["compiled_after_translation"]),
            (_("compiled after port rules"), s["compiled_after_rules"]),
            (_("compiled after the model"), s["compiled_after_model"] if self.model else "-"),
            (_("still failing"), s["failed"]),
        ]
        heading = ngettext(
            "hipbot port: {units} translation unit, {arch}, ROCm {rocm}",
            "hipbot port: {units} translation units, {arch}, ROCm {rocm}",
            s["units"],
        )
        lines = [heading.format(units=s["units"], arch=self.arch, rocm=self.rocm)]
        for label, value in rows:
            pct = f" ({100 * value / n:.0f} %)" if isinstance(value, int) else ""
            lines.append(f"  {pad(label, 28)} {value}{pct}")
        failed = [u for u in self.units if u.status == "failed"]
        if failed:
            lines.append(_("failures:"))
            lines += [f"  {u.source}: {localized(u.cause.text) if u.cause else _('unknown')}" for u in failed]
        edited = sum(len(u.edits) for u in self.units)
        if edited:
            lines.append(
                ngettext(
                    "{edits} edit beyond translation (the diff with its reason in --json or --diff)",
                    "{edits} edits beyond translation (diffs with reasons in --json or --diff)",
                    edited,
                ).format(edits=edited)
            )
        return "\n".join(lines)
