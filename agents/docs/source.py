"""Where the docs corpus comes from: a local folder, or the upstream ROCm repositories at a pinned ref.

The corpus layout is ``HIPIFY/docs/...`` (from ROCm/HIPIFY), ``HIP/docs/...`` (from ROCm/HIP) and
``ROCm/docs/...`` (ROCm's own documentation, from ROCm/ROCm: ROCm for AI, tuning guides, GPU
architecture, compatibility); every chunk keeps its path relative to that root and a GitHub URL at
the exact commit it came from.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from tqdm import tqdm

from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_

REPOS = {"HIPIFY": "ROCm/HIPIFY", "HIP": "ROCm/HIP", "ROCm": "ROCm/ROCm"}
# The commits of ../shared/hip-docs (its MANIFEST.md): HIPIFY with the HIP 6.3 tables, HIP docs of
# Oct 2024, ROCm docs of Mar 2025.
PINNED = {
    "HIPIFY": "014177bc2e434ce3e834aa4f3d0e2abb1efa9796",
    "HIP": "c5e11fcac8249ce4f7e70157588ff9661a870b59",
    "ROCm": "e396b4898f459db094bfd60b876f419f77eb9f09",
}
RAW_BASE = "https://raw.githubusercontent.com"
_TABLES = [
    f"{lib}_supported_by_{kind}.md"
    for lib, kinds in {
        "CUBLAS_API": ("HIP", "HIP_and_ROC", "ROC"),
        "CUB_API": ("HIP",),
        "CUDA_Device_API": ("HIP",),
        "CUDA_Driver_API_functions": ("HIP",),
        "CUDA_RTC_API": ("HIP",),
        "CUDA_Runtime_API_functions": ("HIP",),
        "CUDNN_API": ("HIP", "HIP_and_MIOPEN", "MIOPEN"),
        "CUFFT_API": ("HIP",),
        "CURAND_API": ("HIP", "HIP_and_ROC", "ROC"),
        "CUSOLVER_API": ("HIP", "HIP_and_ROC", "ROC"),
        "CUSPARSE_API": ("HIP", "HIP_and_ROC", "ROC"),
        "cuComplex_API": ("HIP",),
    }.items()
    for kind in kinds
]
# ROCm/docs: the pages about running AI and HPC work on AMD GPUs (the corpus' MANIFEST.md).
_ROCM_DOCS = (
    "what-is-rocm.rst",
    "index.md",
    "about/license.md",
    "compatibility/compatibility-matrix.rst",
    *(
        f"compatibility/ml-compatibility/{name}-compatibility.rst"
        for name in ("jax", "tensorflow", "pytorch")
    ),
    *(
        f"conceptual/{name}"
        for name in (
            "pcie-atomics.rst",
            "iommu.rst",
            "gpu-arch/mi300-mi200-performance-counters.rst",
            "gpu-arch/mi300.md",
            "gpu-arch/mi250.md",
            "gpu-arch/mi100.md",
            "compiler-topics.md",
            "cmake-packages.rst",
            "gpu-isolation.md",
            "file-reorg.md",
            "gpu-arch.md",
            "oversubscription.rst",
            "ai-pytorch-inception.md",
        )
    ),
    "release/versions.md",
    *(
        f"reference/{name}"
        for name in (
            "rocm-tools.md",
            "graph-safe-support.rst",
            "precision-support.rst",
            "api-libraries.md",
            "gpu-arch-specs.rst",
        )
    ),
    *(
        f"how-to/rocm-for-ai/{name}"
        for name in (
            "index.rst",
            "training/index.rst",
            "training/scale-model-training.rst",
            "training/prerequisite-system-validation.rst",
            "training/benchmark-docker/megatron-lm.rst",
            "training/benchmark-docker/pytorch-training.rst",
            "fine-tuning/index.rst",
            "fine-tuning/overview.rst",
            "fine-tuning/fine-tuning-and-inference.rst",
            "fine-tuning/single-gpu-fine-tuning-and-inference.rst",
            "fine-tuning/multi-gpu-fine-tuning-and-inference.rst",
            "inference/index.rst",
            "inference/install.rst",
            "inference/hugging-face-models.rst",
            "inference/llm-inference-frameworks.rst",
            "inference/vllm-benchmark.rst",
            "inference/deploy-your-model.rst",
            "inference-optimization/index.rst",
            "inference-optimization/model-quantization.rst",
            "inference-optimization/model-acceleration-libraries.rst",
            "inference-optimization/optimizing-with-composable-kernel.md",
            "inference-optimization/optimizing-triton-kernel.rst",
            "inference-optimization/profiling-and-debugging.rst",
            "inference-optimization/workload.rst",
        )
    ),
    *(
        f"how-to/{name}"
        for name in (
            "system-debugging.md",
            "programming_guide.rst",
            "deep-learning-rocm.rst",
            "tuning-guides/mi300x/index.rst",
            "rocm-for-hpc/index.rst",
            "system-optimization/index.rst",
            "system-optimization/mi300x.rst",
            "system-optimization/mi300a.rst",
            "system-optimization/mi200.md",
            "system-optimization/mi100.md",
            "system-optimization/w6000-v620.md",
            "Bar-Memory.rst",
            "build-rocm.rst",
            "setting-cus.rst",
        )
    ),
)
# The files the assistant answers from, relative to the corpus root.
FILES: tuple[str, ...] = (
    *(f"HIPIFY/docs/tables/{name}" for name in _TABLES),
    "HIPIFY/docs/supported_apis.md",
    "HIPIFY/docs/hipify-clang.rst",
    "HIPIFY/docs/hipify-perl.rst",
    *(
        f"HIP/docs/how-to/{name}"
        for name in (
            "debugging.rst",
            "faq.md",
            "hip_porting_driver_api.md",
            "hip_porting_guide.md",
            "hip_rtc.md",
            "logging.rst",
            "performance_guidelines.rst",
            "programming_manual.md",
        )
    ),
    *(
        f"HIP/docs/reference/{name}"
        for name in (
            "deprecated_api_list.rst",
            "fp8_numbers.rst",
            "kernel_language.rst",
            "terms.md",
            "virtual_rocr.rst",
        )
    ),
    *(
        f"HIP/docs/understand/{name}"
        for name in (
            "amd_clr.rst",
            "glossary.md",
            "hardware_implementation.rst",
            "programming_model.rst",
            "programming_model_reference.rst",
        )
    ),
    *(f"ROCm/docs/{name}" for name in _ROCM_DOCS),
)
SUFFIXES = (".md", ".rst")


def corpus_files(root: Path) -> list[Path]:
    """Every Markdown/reST file under ``HIPIFY/docs``, ``HIP/docs`` and ``ROCm/docs`` of a corpus root
    (a corpus without ``ROCm/`` is still one: older copies hold only HIP and HIPIFY)."""
    root = Path(root)
    if not (root / "HIPIFY").is_dir() and not (root / "HIP").is_dir():
        raise HipbotError(
            N_("{root} is not a HIP docs corpus (no HIPIFY/ or HIP/ folder)", root=root),
            hint=N_(
                "pass the folder holding HIPIFY/docs, HIP/docs (and ROCm/docs), or use: hipbot ingest --download"
            ),
        )
    files = [
        p
        for top in REPOS
        for p in sorted((root / top / "docs").rglob("*"))
        if p.suffix in SUFFIXES and p.is_file()
    ]
    if not files:
        raise HipbotError(
            N_("no .md or .rst files under {root}/HIPIFY/docs, HIP/docs or ROCm/docs", root=root)
        )
    return files


def commits(root: Path) -> dict[str, str]:
    """The commit (or ref) of each top folder, from the corpus MANIFEST.md; the pinned ones otherwise."""
    found = dict(PINNED)
    manifest = Path(root) / "MANIFEST.md"
    if manifest.is_file():
        for line in manifest.read_text(encoding="utf-8").splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 3 and cells[0].rstrip("/") in REPOS and cells[2]:
                found[cells[0].rstrip("/")] = cells[2]
    return found


def upstream_url(rel: str, refs: dict[str, str]) -> str:
    """``HIPIFY/docs/x.md`` -> ``https://github.com/ROCm/HIPIFY/blob/<commit>/docs/x.md``."""
    top, _, rest = rel.partition("/")
    repo = REPOS.get(top)
    if repo is None:
        return ""
    return f"https://github.com/{repo}/blob/{refs.get(top, PINNED[top])}/{rest}"


def download(
    settings: Settings, ref: str | None = None, progress: bool = True, base_url: str = RAW_BASE
) -> Path:
    """Fetch FILES from GitHub at ``ref`` (a tag such as ``rocm-6.3.0``, for all three repositories)
    or at the pinned commits, into ``$HIPBOT_HOME/docs-cache/<ref>``; a complete cache is reused."""
    if ref is not None and not re.fullmatch(r"[\w.\-/]+", ref):
        raise HipbotError(N_("not a git ref: {ref!r}", ref=ref), hint=N_("e.g. --ref rocm-6.3.0"))
    refs = {top: ref for top in REPOS} if ref else dict(PINNED)
    cache = Path(settings.home) / "docs-cache" / (ref.replace("/", "_") if ref else "pinned")
    done = cache / ".complete"
    if done.is_file():
        return cache
    missing: list[str] = []
    try:
        with httpx.Client(timeout=60, follow_redirects=True) as client:
            for rel in tqdm(FILES, desc="download", unit="file", disable=not progress):
                top, _, rest = rel.partition("/")
                url = f"{base_url.rstrip('/')}/{REPOS[top]}/{refs[top]}/{rest}"
                response = client.get(url)
                if response.status_code == 404:
                    missing.append(rel)
                    continue
                response.raise_for_status()
                target = cache / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(response.content)
    except httpx.HTTPError as exc:
        raise HipbotError(
            N_("cannot download the docs: {error}", error=exc),
            hint=N_("check the network, or pass a local copy with --docs PATH"),
        ) from exc
    if all(rel in missing for rel in FILES if rel.startswith("HIPIFY/docs/tables/")):
        raise HipbotError(
            N_("the HIPIFY mapping tables are not at ref {ref}", ref=ref or PINNED["HIPIFY"]),
            hint=N_("use a ROCm release tag that has HIPIFY/docs/tables, e.g. --ref rocm-6.3.0"),
        )
    rows = "\n".join(f"| {top}/ | {REPOS[top]} | {refs[top]} | downloaded |" for top in REPOS)
    (cache / "MANIFEST.md").write_text(
        "# HIP docs downloaded by hipbot\n\n| folder | upstream repository | commit | date |\n"
        f"| --- | --- | --- | --- |\n{rows}\n"
        + (f"\nNot present at this ref: {', '.join(missing)}\n" if missing else ""),
        encoding="utf-8",
    )
    done.write_text("\n".join(missing), encoding="utf-8")
    return cache


def resolve_corpus(
    settings: Settings, docs: Path | None, download_it: bool, ref: str | None, progress: bool
) -> Path:
    """The corpus to ingest: --docs, else --download, else the configured / discovered one."""
    if docs is not None and download_it:
        raise HipbotError(N_("give either --docs PATH or --download, not both"))
    if download_it:
        return download(settings, ref=ref, progress=progress)
    if ref is not None:
        raise HipbotError(N_("--ref goes with --download"))
    root = docs if docs is not None else settings.docs
    if root is None:
        raise HipbotError(
            N_("no HIP docs corpus found"),
            hint=N_("pass --docs PATH (a folder with HIPIFY/ and HIP/), set HIPBOT_DOCS, or use --download"),
        )
    root = Path(root).expanduser()
    if not root.is_dir():
        raise HipbotError(N_("docs folder not found: {root}", root=root))
    return root
