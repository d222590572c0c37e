"""The causal-LM loss without the logits tensor, and without a device sync.

The plain path computes ``lm_head`` over every position (batch x length x vocabulary, 4 x 1024 x
128k bf16 plus fp32 copies for an 8B Llama-3) and then drops the positions whose label is ignored.
Here only the positions that carry a label reach the output projection, and the projection and
the cross-entropy run together. On a GPU (ROCm or CUDA) the gradient is computed chunk by chunk in
the forward pass by ``ce_triton``'s kernel, as Liger's fused linear cross-entropy does but without
counting the labelled tokens on the host (Liger's ``.item()`` and a boolean index of the labelled
positions each stop the CPU until the GPU has finished the forward pass, and the GPU then idles
while Python launches the backward). The positions come from the collator (``label_index``,
computed on the CPU with the batch), so the shapes are known without asking the GPU. On a CPU,
chunks of 2048 tokens whose logits are recomputed in the backward pass. The loss is the same: the
sum over labelled tokens divided by ``num_items_in_batch`` (the Trainer's count across gradient
accumulation) or by the number of labelled tokens, as transformers' ``ForCausalLMLoss``.
"""

from __future__ import annotations

import functools
import importlib.util
from types import MethodType
from typing import Any

from hipbot.jobs.finetune.fast.collate import IGNORE_INDEX, LABEL_INDEX

CHUNK_TOKENS = 2048
LOGITS_PER_HIDDEN = 8


def _chunk_loss(hidden: Any, weight: Any, target: Any, softcap: float | None) -> Any:
    import torch
    from torch.nn.functional import cross_entropy, linear

    logits = linear(hidden, weight).float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return cross_entropy(logits, target, reduction="sum", ignore_index=IGNORE_INDEX)


def chunk_rows(rows: int, vocab: int, hidden: int) -> int:
    """Rows a chunk of the GPU path takes: logits about ``LOGITS_PER_HIDDEN`` times the size of the
    whole batch's hidden states (1,024 rows of an 8B Llama-3's 4,096 labelled tokens: 256 MiB of
    bf16 logits), a power of two. Liger sizes its chunks as the hidden states (128 rows): each
    chunk's two GEMMs then read the 1 GiB head from memory for too few rows to be compute-bound."""
    per = -(-vocab // (LOGITS_PER_HIDDEN * hidden))
    return max(1, min(rows, 1 << max(0, (-(-rows // per) - 1).bit_length())))


@functools.cache
def _fused_function() -> Any:
    import torch

    from hipbot.jobs.finetune.fast.ce_triton import xent_grad_

    class LinearCrossEntropySum(torch.autograd.Function):
        """sum CE(hidden @ weight.T, target); the hidden states' gradient made in the forward pass."""

        @staticmethod
        def forward(ctx: Any, hidden: Any, weight: Any, target: Any, softcap: float | None) -> Any:
            rows = hidden.shape[0]
            chunk = chunk_rows(rows, weight.shape[0], weight.shape[1])
            losses = torch.zeros(rows, dtype=torch.float32, device=hidden.device)
            grad = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
            logits = torch.empty((chunk, weight.shape[0]), dtype=hidden.dtype, device=hidden.device)
            for start in range(0, rows, chunk):
                end = min(start + chunk, rows)
                part = logits[: end - start]
                torch.mm(hidden[start:end], weight.t(), out=part)
                xent_grad_(
                    part, target[start:end], losses[start:end], ignore_index=IGNORE_INDEX, softcap=softcap
                )
                if grad is not None:
                    torch.mm(part, weight, out=grad[start:end])
            ctx.save_for_backward(grad)
            return losses.sum()

        @staticmethod
        def backward(ctx: Any, grad_output: Any) -> Any:
            (grad,) = ctx.saved_tensors
            return grad * grad_output, None, None, None

    return LinearCrossEntropySum


@functools.cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def fused_kernel_usable(hidden: Any, weight: Any) -> bool:
    """The Triton path: a GPU tensor, Triton installed, and a frozen head (LoRA's case; a trained
    head takes Liger's function or the chunked one, which also make its gradient)."""
    return hidden.is_cuda and not weight.requires_grad and triton_installed()


def linear_cross_entropy_sum(
    hidden: Any,
    weight: Any,
    target: Any,
    *,
    softcap: float | None = None,
    liger: bool = False,
    kernel: bool | None = None,
) -> Any:
    """sum over rows of CE(hidden @ weight.T, target), never holding more than one chunk's logits.
    ``kernel``: use ``ce_triton`` (default: where ``fused_kernel_usable``)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    if kernel if kernel is not None else fused_kernel_usable(hidden, weight):
        return _fused_function().apply(hidden, weight, target, softcap)
    if liger and hidden.is_cuda:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        return liger_fused_linear_cross_entropy(
            hidden, weight, target, ignore_index=IGNORE_INDEX, reduction="sum", softcap=softcap
        )
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], CHUNK_TOKENS):
        piece = slice(start, start + CHUNK_TOKENS)
        total = total + checkpoint(
            _chunk_loss, hidden[piece], weight, target[piece], softcap, use_reentrant=False
        )
    return total


def _fused_forward(
    self: Any,
    input_ids: Any = None,
    attention_mask: Any = None,
    position_ids: Any = None,
    past_key_values: Any = None,
    inputs_embeds: Any = None,
    labels: Any = None,
    use_cache: bool | None = None,
    **kwargs: Any,
) -> Any:
    """A ``*ForCausalLM.forward`` whose loss takes only labelled positions through ``lm_head``."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    num_items = kwargs.pop("num_items_in_batch", None)
    index = kwargs.pop(LABEL_INDEX, None)
    kwargs.pop("logits_to_keep", None)
    for flag in ("return_dict", "output_attentions", "output_hidden_states"):
        if not kwargs.get(flag):  # peft passes them as None; the fused loss returns neither
            kwargs.pop(flag, None)
    if past_key_values is not None:
        kwargs["past_key_values"] = past_key_values
    outputs = self.model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )
    hidden = outputs.last_hidden_state
    softcap = getattr(self.config, "final_logit_softcapping", None)
    if labels is None:
        logits = self.lm_head(hidden)
        if softcap:
            logits = (logits / softcap).tanh() * softcap
        return CausalLMOutputWithPast(logits=logits, past_key_values=outputs.past_key_values)
    if index is not None:  # the collator's positions: no boolean index, no sync
        index = index.to(hidden.device)
        rows = hidden.flatten(0, 1).index_select(0, index)
        targets = labels.to(hidden.device).flatten().index_select(0, index + 1)
        labelled: Any = index.numel()
    else:
        shifted = labels[..., 1:].to(hidden.device)
        keep = shifted != IGNORE_INDEX
        rows, targets, labelled = hidden[..., :-1, :][keep], shifted[keep], keep.sum()
    total = linear_cross_entropy_sum(
        rows, self.lm_head.weight, targets, softcap=softcap, liger=self._hipbot_liger_loss
    )
    count = num_items if num_items is not None else labelled
    if hasattr(count, "to"):
        count = count.to(total.device)
    return CausalLMOutputWithPast(loss=total / count)


def install(causal_lm: Any, *, liger: bool) -> None:
    """Replace this model instance's forward (before peft wraps it) with ``_fused_forward``."""
    causal_lm._hipbot_liger_loss = liger
    causal_lm.forward = MethodType(_fused_forward, causal_lm)
