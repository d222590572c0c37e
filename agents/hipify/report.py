"""What the translator takes and gives: ``HipifyOptions`` in, ``HipifyResult`` (the text, a
``HipifyReport`` of what was converted and what was not, the porting lints) out."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from hipbot.errors import HipbotError
from hipbot.i18n import _

if TYPE_CHECKING:
    from hipbot.agents.hipify.lints import Lint


class TranslationTimeout(HipbotError):
    """A translation ran past the time limit its caller gave (``translate(..., time_limit=)``)."""

    http_status = 422


@dataclass(frozen=True)
class Deadline:
    """When a translation must stop (``time.monotonic()``; None: never). The translator's loops ask
    ``check`` every few thousand steps, so a hostile input costs its caller at most the limit."""

    at: float | None = None
    seconds: float = 0.0

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        return cls() if seconds is None else cls(time.monotonic() + seconds, seconds)

    def check(self) -> None:
        if self.at is not None and time.monotonic() > self.at:
            raise TranslationTimeout(
                _("the translation took longer than its {seconds:g} s limit").format(seconds=self.seconds),
                hint=_("send a smaller file, or run `hipbot hipify` on your own machine"),
            )


NO_DEADLINE = Deadline()
CHECK_EVERY = 4096  # loop steps between two deadline checks


@dataclass
class HipifyOptions:
    """hipify-clang's options that change the translation (the others are accepted by the CLI)."""

    roc: bool = False  # rocBLAS/rocSPARSE/rocRAND/rocSOLVER instead of hipBLAS/...
    miopen: bool = False  # MIOpen instead of hipDNN for cuDNN
    experimental: bool = False  # also translate APIs HIP marks experimental
    hip_kernel_execution_syntax: bool = False  # <<<>>> -> hipLaunchKernelGGL
    cuda_kernel_execution_syntax: bool = False  # keep <<<>>> (the default; wins only if given alone)
    use_hip_data_types: bool = False  # cudaDataType_t -> hipDataType even with --roc
    translate_strings: bool = True  # exact CUDA API names inside string literals (hipify-clang)
    insert_runtime_header: bool = True  # add hip/hip_runtime.h when no CUDA main header is included
    # macros/functions other files of the same project define (see ``project_names``): not "unknown"
    project_names: frozenset[str] = frozenset()
    project_kernels: frozenset[str] = frozenset()  # __global__ functions of the other files
    # (path, output file name) of the tree's files whose translation gets another name (x.cu ->
    # x.hip; beside the sources also x.h -> x.hip.h): includes of them follow the rename
    renamed_sources: tuple[tuple[str, str], ...] = ()
    lint: bool = True  # run the AMD porting lints on input and output
    undocumented_features: bool = True  # half2 .x/.y -> reinterpret_cast<half&>(...) like hipify-clang
    skip_excluded_blocks: bool = False  # #if branches known not taken: names only, no launch/call rewrite


@dataclass
class Unconverted:
    name: str
    line: int
    col: int
    reason: str  # "unsupported" | "experimental" | "unknown"
    api: str
    detail: str  # in English (marked N_ where it is written; translated where it is shown)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class HipifyReport:
    """What was converted, and every CUDA identifier left as it was, for one file."""

    filename: str
    total_lines: int = 0
    total_bytes: int = 0
    converted: Counter = field(default_factory=Counter)  # CUDA name -> count
    by_api: Counter = field(default_factory=Counter)  # "CUDA RT API" -> count
    by_type: Counter = field(default_factory=Counter)  # table section / include / kernel_launch
    unconverted: list[Unconverted] = field(default_factory=list)
    changed_lines: set[int] = field(default_factory=set)
    replaced_bytes: int = 0
    kernel_launches: int = 0
    errors: list[str] = field(default_factory=list)
    encoding: str = "utf-8"  # or how many non-UTF-8 bytes were kept as they are (tree.encoding_of)

    @property
    def converted_count(self) -> int:
        return sum(self.converted.values())

    @property
    def conversion_percent(self) -> int:
        total = self.converted_count + len(self.unconverted)
        return 100 if total == 0 else round(100 * self.converted_count / total)

    def to_dict(self) -> dict:
        return {
            "file": self.filename,
            "converted_refs": self.converted_count,
            "unconverted_refs": len(self.unconverted),
            "conversion_percent": self.conversion_percent,
            "replaced_bytes": self.replaced_bytes,
            "total_bytes": self.total_bytes,
            "changed_lines": len(self.changed_lines),
            "total_lines": self.total_lines,
            "kernel_launches": self.kernel_launches,
            "converted_by_api": dict(sorted(self.by_api.items())),
            "converted_by_type": dict(sorted(self.by_type.items())),
            "converted_by_name": dict(sorted(self.converted.items())),
            "unconverted": [u.to_dict() for u in self.unconverted],
            "errors": list(self.errors),
            "encoding": self.encoding,
        }

    def stats_rows(self) -> list[tuple[str, str]]:
        """hipify-clang's --print-stats figures as (name, value) rows."""
        rows = [
            ("CONVERTED refs count", str(self.converted_count)),
            ("UNCONVERTED refs count", str(len(self.unconverted))),
            ("CONVERSION %", str(self.conversion_percent)),
            ("REPLACED bytes", str(self.replaced_bytes)),
            ("TOTAL bytes", str(self.total_bytes)),
            ("CHANGED lines of code", str(len(self.changed_lines))),
            ("TOTAL lines of code", str(self.total_lines)),
        ]
        rows += [(f"type: {k}", str(v)) for k, v in sorted(self.by_type.items())]
        rows += [(f"API: {k}", str(v)) for k, v in sorted(self.by_api.items())]
        rows += [(f"name: {k}", str(v)) for k, v in sorted(self.converted.items())]
        unconv = Counter(u.name for u in self.unconverted)
        rows += [(f"unconverted: {k}", str(v)) for k, v in sorted(unconv.items())]
        return rows


@dataclass
class HipifyResult:
    text: str
    report: HipifyReport
    lints: list[Lint] = field(default_factory=list)  # on the CUDA input and the HIP output

    @property
    def ok(self) -> bool:
        return not self.report.errors

    def to_dict(self) -> dict:
        return {
            "report": self.report.to_dict(),
            "lints": [lint.to_dict() for lint in self.lints],
        }
