"""What accelerators this machine has, and whether a job can run on them.

ROCm builds of PyTorch use the ``torch.cuda`` API, so one code path reads both: ``torch.version.hip``
says which runtime, ``gcnArchName`` names an AMD chip (gfx90a = MI200, gfx942 = MI300, gfx11xx =
RDNA3). bf16 needs CDNA2+/RDNA3+ on AMD and Ampere+ on NVIDIA.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from hipbot.errors import HipbotError
from hipbot.i18n import N_

GIB = 1024**3
# Environment knobs a ROCm worker passes through to training children.
ROCM_ENV = (
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "HSA_FORCE_FINE_GRAIN_PCIE",
    "NCCL_SOCKET_IFNAME",
    "RCCL_MSCCL_ENABLE",
    "TORCH_BLAS_PREFER_HIPBLASLT",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)
BF16_AMD_PREFIXES = ("gfx90a", "gfx94", "gfx95", "gfx11", "gfx12")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    arch: str
    memory_gib: float
    bf16: bool


@dataclass(frozen=True)
class GpuInfo:
    """One worker's accelerators as it advertises them to the coordinator."""

    backend: str  # "rocm", "cuda" or "cpu"
    runtime: str | None  # torch.version.hip / torch.version.cuda
    torch: str
    gpus: list[Gpu] = field(default_factory=list)
    visible: str | None = None

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def memory_gib(self) -> float:
        """Memory of the smallest GPU: data-parallel jobs need it on every one."""
        return min((g.memory_gib for g in self.gpus), default=0.0)

    @property
    def bf16(self) -> bool:
        return bool(self.gpus) and all(g.bf16 for g in self.gpus)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuInfo:
        gpus = [Gpu(**g) for g in data.get("gpus", [])]
        return cls(
            backend=data.get("backend", "cpu"),
            runtime=data.get("runtime"),
            torch=data.get("torch", ""),
            gpus=gpus,
            visible=data.get("visible"),
        )

    def describe(self) -> str:
        if not self.gpus:
            return f"CPU only (torch {self.torch})"
        names = {f"{g.name} ({g.arch}, {g.memory_gib:.0f} GiB)" for g in self.gpus}
        return f"{self.count}x {', '.join(sorted(names))}, {self.backend} {self.runtime}"


def _amd_bf16(arch: str) -> bool:
    return arch.startswith(BF16_AMD_PREFIXES)


def detect() -> GpuInfo:
    """Read the GPUs through torch; a machine without any reports backend 'cpu' (tests, CI)."""
    import torch

    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    visible = os.environ.get("HIP_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
    if not torch.cuda.is_available():
        return GpuInfo(backend="cpu", runtime=None, torch=torch.__version__, visible=visible)
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        arch = getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}"
        if hip:
            arch = arch.split(":")[0]
            bf16 = _amd_bf16(arch)
        else:
            bf16 = props.major >= 8
        gpus.append(Gpu(i, props.name, arch, round(props.total_memory / GIB, 1), bf16))
    return GpuInfo(
        backend="rocm" if hip else "cuda",
        runtime=hip or cuda,
        torch=torch.__version__,
        gpus=gpus,
        visible=visible,
    )


def refusal(info: GpuInfo, spec: Any, needed_gib: float | None, *, allow_cpu: bool = False) -> str | None:
    """Why this machine cannot run the job, or None when it can."""
    if not info.gpus:
        if allow_cpu:
            return None
        return "this machine has no ROCm or CUDA GPU visible to PyTorch (check HIP_VISIBLE_DEVICES and the torch build)"
    if spec.bf16 and not info.bf16:
        archs = ", ".join(sorted({g.arch for g in info.gpus}))
        return f"bf16 was requested but {archs} has no bf16 (needs MI200/MI300 or RDNA3+); set fp16: true"
    if spec.pure_bf16 and not info.bf16:
        return "pure_bf16 needs bf16 support on the GPU"
    if needed_gib is not None and needed_gib > info.memory_gib:
        return f"needs ~{needed_gib:.1f} GiB per GPU; this worker's GPUs have {info.memory_gib:.0f} GiB"
    return None


def check_runnable(info: GpuInfo, spec: Any, needed_gib: float | None, *, allow_cpu: bool = False) -> None:
    reason = refusal(info, spec, needed_gib, allow_cpu=allow_cpu)
    if reason:
        raise HipbotError(N_("cannot run this job here: {reason}", reason=reason))
