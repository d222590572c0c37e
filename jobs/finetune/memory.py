"""Peak GPU memory of a LoRA job, estimated from the model's config before any GPU is touched.

The estimate decides which worker may claim a job, and tells a user whose job fits no worker what
to change. It counts what PyTorch's allocator holds at the peak of a training step:

* frozen weights in the compute dtype (ZeRO-3 shards them over the GPUs; with parameter offload
  only the gathered modules stay, as DeepSpeed's ``estimate_zero3_model_states_mem_needs`` counts);
* LoRA weights in fp32 with their gradients and Adam moments (16 bytes each; DeepSpeed's 18 for
  ZeRO stages, where a bf16 copy is kept beside the fp32 master, offloaded with ``offload_optimizer``);
* activations: per token and layer, linear in the hidden, intermediate and KV widths without
  gradient checkpointing; one hidden state per layer plus one recomputed layer with it;
* the logits and the loss's fp32 copies over the vocabulary, which dominate small models.

The fast path (``fast/``) changes four terms: Liger's RMSNorm and SwiGLU keep fewer activations
per token, the fused loss holds one chunk of logits instead of all of them, the fused LoRA linears
keep one input per group of adapters reading it (peft keeps a copy per adapter), and selective
checkpointing recomputes only the layers the GPU needs, or a fifth of them where it needs fewer
(``checkpointed_layers``). The estimate counts batch x cutoff_len tokens, the most a padding-free
batch can hold.

The per-token coefficients were measured on an H200 (bench/bench_finetune.py) and are kept
within 15 % of the measured peaks there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hipbot.i18n import N_, Joined, Message, _
from hipbot.jobs.finetune.fast.loss import chunk_rows

GIB = 1024**3
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# Bytes per token and layer, times the width named (bf16/fp16 activations), besides the inputs the
# LoRA adapters keep (``_lora_inputs``); see module docstring.
ACT_PER_HIDDEN = 12.0
ACT_PER_INTERMEDIATE = 6.0
ACT_PER_KV = 4.0
# Extra bytes per token and layer under ZeRO-3 (LinearFunctionForZeroStage3 saves 3 hidden-wide
# inputs and the intermediate-wide one, bf16): +7.0 GiB measured for the 8B recipe.
ZERO3_INPUTS_PER_HIDDEN = 6.0
ZERO3_INPUTS_PER_INTERMEDIATE = 2.0
# Bytes per token per vocabulary entry at the loss: bf16 logits, fp32 copy, log-softmax and grads.
LOGIT_BYTES = 12.0
# With Liger's kernels: RMSNorm keeps its input and SwiGLU its two inputs (no SiLU output, no fp32 copies).
LIGER_PER_HIDDEN = 8.0
LIGER_PER_INTERMEDIATE = 4.0
# The share of a GPU's memory the fast path's selective checkpointing plans to fill.
HEADROOM = 0.85
# With gradient checkpointing on, the fast path recomputes at least this share of the layers: one
# layer's recompute costs ~1 % of a step (every layer: 1.32x on the H200 recipe), so a fifth keeps
# the low-memory mode within 1.1x of the fast mode's step time.
LOW_MEMORY_SHARE = 0.2
# Allocator slack and CUDA workspaces (cuBLAS, attention) that do not grow with the model.
WORKSPACE = 0.5 * GIB


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only model's config that memory depends on."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
        hidden = int(get("hidden_size") or get("n_embd") or get("d_model"))
        heads = int(get("num_attention_heads") or get("n_head"))
        return cls(
            hidden=hidden,
            layers=int(get("num_hidden_layers") or get("n_layer")),
            intermediate=int(get("intermediate_size") or get("n_inner") or 4 * hidden),
            heads=heads,
            kv_heads=int(get("num_key_value_heads") or heads),
            head_dim=int(get("head_dim") or hidden // heads),
            vocab=int(get("vocab_size")),
            tied=bool(get("tie_word_embeddings", False)),
        )

    def modules(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear of one layer, Llama names."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    @property
    def layer_params(self) -> int:
        return sum(a * b for a, b in self.modules().values()) + 2 * self.hidden

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        heads = self.embed_params * (1 if self.tied else 2)
        return self.layers * self.layer_params + heads + self.hidden


def load_model_config(model: str | Path, *, allow_download: bool = False) -> dict[str, Any]:
    """config.json of a local model folder, or of a Hub model in the local cache (fetched only when
    ``allow_download``: the coordinator must not block a request on the network)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return json.loads((path / "config.json").read_text(encoding="utf-8"))
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(model), local_files_only=not allow_download).to_dict()


def lora_params(shape: ModelShape, targets: list[str], rank: int) -> int:
    mods = shape.modules()
    names = ALL_LINEAR if "all" in targets else [t.split(".")[-1] for t in targets]
    return shape.layers * sum(rank * (mods[n][0] + mods[n][1]) for n in names if n in mods)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU at the peak of a step, by part; ``total`` is what a worker's GPU must hold."""

    weights: int
    lora: int
    activations: int
    logits: int
    workspace: int
    cpu_offload: int
    params: int
    trainable: int

    @property
    def total(self) -> int:
        return self.weights + self.lora + self.activations + self.logits + self.workspace

    @property
    def total_gib(self) -> float:
        return self.total / GIB

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_gib": round(self.total_gib, 2),
            "weights_gib": round(self.weights / GIB, 2),
            "lora_gib": round(self.lora / GIB, 3),
            "activations_gib": round(self.activations / GIB, 2),
            "logits_gib": round(self.logits / GIB, 2),
            "cpu_offload_gib": round(self.cpu_offload / GIB, 2),
            "params": self.params,
            "trainable_params": self.trainable,
        }

    def summary(self) -> str:
        """The estimate for people, in the current language (``as_dict`` is never translated)."""
        d = {**self.as_dict(), "trainable": f"{self.trainable:,}", "params": f"{self.params:,}"}
        if self.cpu_offload:
            text = _(
                "~{total_gib:.1f} GiB per GPU (weights {weights_gib}, LoRA+optimizer {lora_gib}, "
                "activations {activations_gib}, logits {logits_gib}, CPU offload {cpu_offload_gib} GiB of "
                "host memory); {trainable} of {params} parameters trained"
            )
        else:
            text = _(
                "~{total_gib:.1f} GiB per GPU (weights {weights_gib}, LoRA+optimizer {lora_gib}, "
                "activations {activations_gib}, logits {logits_gib}); {trainable} of {params} parameters trained"
            )
        return text.format(**d)


def _fast_pieces(spec: Any, model_config: Any) -> tuple[bool, bool, bool]:
    """(Liger's kernels, the fused loss, the fused LoRA linears) as the fast path would run them
    on a GPU with Liger."""
    from hipbot.jobs.finetune.fast.plan import decide

    get = (
        model_config.get if isinstance(model_config, dict) else lambda k, d=None: getattr(model_config, k, d)
    )
    plan = decide(spec, str(get("model_type", "") or ""), on_gpu=True, liger_available=True)
    return plan.liger, plan.fused_loss, plan.fused_lora


def _lora_inputs(shape: ModelShape, targets: list[str], fused: bool) -> int:
    """Bytes per token and layer of the inputs the LoRA adapters keep for their gradients: peft
    keeps a compute-dtype copy per adapter (it casts the input to the adapter's fp32, autocast back);
    the fused linears keep the input itself, once for the adapters that read the same tensor."""
    mods = shape.modules()
    names = ALL_LINEAR if "all" in targets else [t.split(".")[-1] for t in targets]
    names = [n for n in names if n in mods]
    if not fused:
        return sum(2 * mods[n][0] for n in names)
    groups = {("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("o_proj",), ("down_proj",)}
    return sum(2 * mods[group[0]][0] for group in groups if any(n in group for n in names))


def estimate(
    spec: Any,
    model_config: Any,
    n_gpus: int = 1,
    *,
    precision: str = "bf16",
    gpu_gib: float | None = None,
) -> MemoryEstimate:
    """Peak bytes per GPU for ``spec`` on ``n_gpus`` GPUs (data parallel, per-device batch).

    With gradient checkpointing on the fast path, ``gpu_gib`` (the GPU the job runs on) lets the
    estimate checkpoint only the layers that GPU needs (``checkpointed_layers``); without it every
    layer is checkpointed: the least memory the job can run in.
    """
    shape = ModelShape.from_config(model_config)
    pieces = _fast_pieces(spec, model_config)
    if not spec.use_gradient_checkpointing:
        ckpt = 0
    elif gpu_gib is None or not any(pieces):
        ckpt = shape.layers
    else:
        ckpt = checkpointed_layers(spec, model_config, n_gpus, gpu_gib, precision=precision)
    return _estimate(spec, shape, n_gpus, precision, ckpt, *pieces)


def checkpointed_layers(
    spec: Any, model_config: Any, n_gpus: int, gpu_gib: float, *, precision: str = "bf16"
) -> int:
    """The decoder layers to checkpoint: the fewest that make the job fit ``HEADROOM`` of
    ``gpu_gib`` (every layer when even that does not fit), and no fewer than ``LOW_MEMORY_SHARE``
    of them, so that asking for checkpointing always saves memory. Recomputing a layer costs about
    a third of its step time, so the fast path recomputes no more than that asks for."""
    shape = ModelShape.from_config(model_config)
    pieces = _fast_pieces(spec, model_config)
    budget = HEADROOM * gpu_gib * GIB
    least = round(LOW_MEMORY_SHARE * shape.layers)
    for ckpt in range(least, shape.layers + 1):
        if _estimate(spec, shape, n_gpus, precision, ckpt, *pieces).total <= budget:
            return ckpt
    return shape.layers


def _estimate(
    spec: Any,
    shape: ModelShape,
    n_gpus: int,
    precision: str,
    ckpt: int,
    liger: bool,
    fused_loss: bool,
    fused_lora: bool,
) -> MemoryEstimate:
    """The estimate with ``ckpt`` of the layers checkpointed."""
    n = max(1, n_gpus)
    wbytes = 4 if precision == "fp32" else 2
    stage = spec.zero_stage if spec.deepspeed else 0
    offload = spec.offload if spec.deepspeed else False
    trainable = lora_params(shape, spec.lora_target, spec.lora_rank)
    frozen = shape.params
    tokens = spec.per_device_train_batch_size * spec.cutoff_len

    cpu = 0
    if stage == 3 and offload:
        # Parameters live on the CPU; each module is gathered when used (the largest is the embedding).
        weights = wbytes * max(shape.embed_params, shape.layer_params) * 2
        cpu += wbytes * frozen
    elif stage == 3:
        weights = wbytes * frozen // n + wbytes * shape.layer_params
    else:
        weights = wbytes * frozen
    state_bytes = 18 if stage else 16
    if offload:
        lora = 4 * trainable  # bf16 parameter + gradient on the GPU, fp32 master and Adam on the CPU
        cpu += 12 * trainable
    elif stage >= 1:
        lora = 4 * trainable + (state_bytes - 4) * trainable // n
    else:
        lora = state_bytes * trainable

    kv = shape.kv_heads * shape.head_dim
    per_hidden, per_inter = (
        (LIGER_PER_HIDDEN, LIGER_PER_INTERMEDIATE) if liger else (ACT_PER_HIDDEN, ACT_PER_INTERMEDIATE)
    )
    per_layer_token = per_hidden * shape.hidden + per_inter * shape.intermediate + ACT_PER_KV * kv
    per_layer_token += _lora_inputs(shape, spec.lora_target, fused_lora)
    per_layer_token += 2 * spec.lora_rank * 2  # LoRA's rank-wide intermediates
    if stage == 3:
        # ZeRO-3 swaps nn.Linear's autograd for its own function, which saves every linear's input
        # even for frozen weights: the attention and MLP inputs plus the MLP's intermediate.
        per_layer_token += (
            ZERO3_INPUTS_PER_HIDDEN * shape.hidden + ZERO3_INPUTS_PER_INTERMEDIATE * shape.intermediate
        )
    kept = shape.layers - ckpt
    # a checkpointed layer keeps its input; the one being recomputed holds its whole activations
    activations = tokens * (
        kept * per_layer_token + ckpt * 2 * shape.hidden + (per_layer_token if ckpt else 0)
    )
    if fused_loss:
        # labelled tokens only, a chunk at a time (fast/loss.py): the chunk's bf16 logits, which
        # the kernel turns into their gradient in place, and the hidden states' gradient
        rows = chunk_rows(tokens, shape.vocab, shape.hidden)
        logits = int(rows * shape.vocab * 2 + tokens * shape.hidden * 2)
    else:
        logits = int(tokens * shape.vocab * LOGIT_BYTES)
    return MemoryEstimate(
        weights=int(weights),
        lora=int(lora),
        activations=int(activations),
        logits=logits,
        workspace=int(WORKSPACE),
        cpu_offload=int(cpu),
        params=frozen,
        trainable=trainable,
    )


def auto_deepspeed(spec: Any, model_config: Any, n_gpus: int, gpu_gib: float) -> str | None:
    """``deepspeed: auto`` (or none named): no DeepSpeed on one GPU, ZeRO-2 across GPUs, and
    ZeRO-3, then ZeRO-3 with CPU offload, only when the estimate does not fit ``gpu_gib``."""
    if not gpu_gib:
        return None  # CPU ranks train with plain DDP on gloo
    for choice in ("z2" if n_gpus > 1 else None, "z3", "z3_offload"):
        trial = spec.model_copy(update={"deepspeed": choice})
        if estimate(trial, model_config, n_gpus, gpu_gib=gpu_gib).total <= HEADROOM * gpu_gib * GIB:
            return choice
    return "z3_offload"


def fit_message(est: MemoryEstimate, largest_gib: float | None, spec: Any) -> Message:
    """What to tell a user whose job fits no worker (English where a ``str`` goes, localized where
    shown)."""
    where = (
        N_("the largest worker has {gib} GiB", gib=f"{largest_gib:.0f}")
        if largest_gib
        else N_("no worker is registered yet")
    )
    tips: list[str] = []
    if not (spec.deepspeed and spec.offload):
        tips.append("deepspeed: z3_offload")
    if not spec.use_gradient_checkpointing:
        tips.append("gradient_checkpointing: true")
    if spec.per_device_train_batch_size > 1:
        tips.append(
            N_(
                "a smaller batch (per_device_train_batch_size: {size}, with more gradient_accumulation_steps)",
                size=max(1, spec.per_device_train_batch_size // 2),
            )
        )
    if spec.cutoff_len > 512:
        tips.append(f"cutoff_len: {spec.cutoff_len // 2}")
    return N_(
        "needs ~{gib} GiB; {where}; try {tips}",
        gib=f"{est.total_gib:.1f}",
        where=where,
        tips=Joined(" / ", tips) if tips else N_("a smaller model"),
    )
