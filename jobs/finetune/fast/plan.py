"""Which fast pieces a job gets, and why a piece is off.

LLaMA-Factory's own switches are honoured: ``enable_liger_kernel`` (Liger's fused RMSNorm,
SwiGLU and RoPE; the fused linear cross-entropy is hipbot's own, ``loss``), ``use_unsloth``
(hipbot's fast path stands in for Unsloth, which has no ROCm build), ``flash_attn`` (``disabled`` = eager attention, ``sdpa`` = SDPA
on padded batches, ``fa2``/``fa3``/``auto`` = padding-free varlen attention), ``neat_packing``
(examples packed to ``cutoff_len`` with attention kept inside each) and ``torch_compile``
(regional: each decoder layer compiled, the identical layers sharing one graph, so compiling an 8B
model takes seconds). ``hipbot_fast: false`` turns off every piece the job did not ask for by name.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any

from hipbot.jobs.finetune.fast.attention import ATTN_IMPLEMENTATION
from hipbot.jobs.finetune.fast.loss import triton_installed
from hipbot.jobs.finetune.fast.residual_norm import FAMILIES as residual_norm_families

log = logging.getLogger(__name__)

# The families whose decoder layers the fast path (and Liger) knows. Gemma 2 is left out: its
# attention soft-caps the logits, which neither FlashAttention varlen nor SDPA computes.
SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma3_text")
FUSED_OPTIMIZERS = {"adamw_torch": "adamw_torch_fused", "adamw_hf": "adamw_torch_fused"}


@dataclass(frozen=True)
class Switches:
    """The job's own speed switches, as its YAML gives them."""

    hipbot_fast: bool = True
    enable_liger_kernel: bool | None = None
    use_unsloth: bool = False
    flash_attn: str = "auto"
    neat_packing: bool = False
    torch_compile: bool = False

    @classmethod
    def from_spec(cls, spec: Any) -> Switches:
        return cls(
            hipbot_fast=spec.hipbot_fast,
            enable_liger_kernel=spec.enable_liger_kernel,
            use_unsloth=spec.use_unsloth,
            flash_attn=spec.flash_attn,
            neat_packing=spec.neat_packing,
            torch_compile=spec.torch_compile,
        )


@dataclass(frozen=True)
class FastPlan:
    """What the trainer installs; ``notes`` says why each piece that is off is off."""

    liger: bool = False
    padding_free: bool = False
    neat_packing: bool = False
    fused_loss: bool = False
    fused_lora: bool = False
    residual_norm: bool = False  # residual adds inside hipbot's RMSNorm kernels (``residual_norm``)
    optim: str | None = None  # the optimizer to use instead of the spec's
    torch_compile: bool = False
    attn_implementation: str | None = None  # None: transformers' default (SDPA)
    notes: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.liger or self.padding_free or self.fused_loss or self.fused_lora or self.residual_norm

    def describe(self) -> str:
        on = [
            name
            for name, used in (
                ("Liger kernels (RMSNorm, SwiGLU, RoPE)", self.liger),
                ("padding-free batches with varlen attention", self.padding_free and not self.neat_packing),
                ("neat packing with varlen attention", self.neat_packing),
                ("fused linear cross-entropy on labelled tokens", self.fused_loss),
                ("fused LoRA linears", self.fused_lora),
                ("residual adds inside the RMSNorm kernels", self.residual_norm),
                (f"optimizer {self.optim}", bool(self.optim)),
                ("torch.compile of each decoder layer", self.torch_compile),
            )
            if used
        ]
        text = "fast path: " + (", ".join(on) if on else "off (plain transformers + peft)")
        return text + "".join(f"; {note}" for note in self.notes)


def liger_installed() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None and triton_installed()


def decide(spec: Any, model_type: str, *, on_gpu: bool, liger_available: bool | None = None) -> FastPlan:
    """The pieces for ``spec`` on this machine (``on_gpu``: CUDA or ROCm)."""
    sw = Switches.from_spec(spec)
    notes: list[str] = []
    fast = sw.hipbot_fast or sw.use_unsloth
    supported = model_type in SUPPORTED
    if not sw.hipbot_fast and not sw.use_unsloth:
        notes.append("hipbot_fast: false")
    elif not supported:
        notes.append(f"model type {model_type!r} has no fast path (it has: {', '.join(SUPPORTED)})")
    on = fast and supported

    liger = False
    if sw.enable_liger_kernel if sw.enable_liger_kernel is not None else on:
        available = liger_installed() if liger_available is None else liger_available
        if not on_gpu:
            notes.append("Liger's Triton kernels need a GPU")
        elif not available:
            notes.append("liger-kernel is not installed (pip install liger-kernel)")
        elif not supported:
            notes.append(f"Liger has no kernels for {model_type!r}")
        else:
            liger = True

    attn: str | None = {"disabled": "eager", "sdpa": "sdpa"}.get(sw.flash_attn)
    padding_free = sw.neat_packing or (on and attn is None)
    if on and attn is not None and not sw.neat_packing:
        notes.append(f"flash_attn: {sw.flash_attn} keeps padded batches")
    zero3 = bool(spec.deepspeed) and spec.zero_stage == 3
    fused_loss = (on or liger) and not zero3 and not spec.label_smoothing_factor
    if (on or liger) and not fused_loss:
        notes.append(
            "the loss takes transformers' path under "
            + ("ZeRO-3 (lm_head is partitioned)" if zero3 else "label smoothing")
        )
    optim = None
    # ZeRO-3 partitions the base weights the fused LoRA linears multiply by
    fused_lora = on and not zero3
    if on and on_gpu and spec.optim in FUSED_OPTIMIZERS and not spec.deepspeed:
        optim = FUSED_OPTIMIZERS[spec.optim]
    # ZeRO-3 gathers a norm's weight only when the norm module itself runs
    residual_norm = (
        on and on_gpu and not zero3 and model_type in residual_norm_families and triton_installed()
    )
    return FastPlan(
        liger=liger,
        padding_free=padding_free,
        neat_packing=sw.neat_packing,
        fused_loss=fused_loss,
        fused_lora=fused_lora,
        residual_norm=residual_norm,
        optim=optim,
        torch_compile=sw.torch_compile,
        attn_implementation=ATTN_IMPLEMENTATION if padding_free else attn,
        notes=tuple(notes),
    )


def apply(plan: FastPlan, model: Any) -> bool:
    """Install the plan's model pieces on a loaded ``*ForCausalLM``, before peft wraps it; True
    when the fused loss is installed (its batches then carry the collator's ``label_index``)."""
    import torch

    from hipbot.jobs.finetune.fast import loss, residual_norm

    if plan.residual_norm:
        log.info(
            "residual adds inside the RMSNorm kernels of %d decoder layers",
            residual_norm.fuse(model, model.config.model_type),
        )
    if plan.liger:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(
            model=model,
            rope=True,
            rms_norm=True,
            swiglu=True,
            cross_entropy=False,
            fused_linear_cross_entropy=False,
        )
    head = model.get_output_embeddings()
    if plan.fused_loss and type(head) is torch.nn.Linear and head.bias is None:
        loss.install(model, liger=plan.liger)
        return True
    if plan.fused_loss:
        log.info("the loss takes transformers' path: %s is not a plain linear head", type(head).__name__)
    return False


def apply_after_lora(plan: FastPlan, model: Any) -> None:
    """Install the pieces that act on the peft model: fused LoRA linears, compiled decoder layers."""
    from hipbot.jobs.finetune.fast import lora

    if plan.fused_lora:
        log.info("fused LoRA forward on %d linears", lora.fuse(model))
    if plan.torch_compile:
        compiled = compile_layers(model)
        log.info(
            "torch.compile: %s",
            f"{compiled} decoder layers, compiled at their first step"
            if compiled
            else "no decoder layers found (transformers' GradientCheckpointingLayer); the model runs eager",
        )


def compile_layers(model: Any) -> int:
    """``nn.Module.compile`` on each decoder layer; returns how many. The layers run one code
    object, so dynamo compiles it once for all of them (and once more when lengths vary)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for layer in layers:
        layer.compile()
    return len(layers)
