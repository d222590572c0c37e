"""The causal-LM loss without the logits tensor.

The plain path computes ``lm_head`` over every position (batch x length x vocabulary, 4 x 1024 x
128k bf16 plus fp32 copies for an 8B Llama-3) and then drops the positions whose label is ignored.
Here only the positions that carry a label reach the output projection, and the projection and
the cross-entropy run together: Liger's fused linear cross-entropy on a GPU where Liger is
installed (the gradient is computed chunk by chunk in the forward pass), else chunks of 2048
tokens whose logits are recomputed in the backward pass. The loss is the same: the sum over
labelled tokens divided by ``num_items_in_batch`` (the Trainer's count across gradient
accumulation) or by the number of labelled tokens, as transformers' ``ForCausalLMLoss``.
"""

from __future__ import annotations

from types import MethodType
from typing import Any

from hipbot.jobs.finetune.fast.collate import IGNORE_INDEX

CHUNK_TOKENS = 2048


def _chunk_loss(hidden: Any, weight: Any, target: Any, softcap: float | None) -> Any:
    import torch
    from torch.nn.functional import cross_entropy, linear

    logits = linear(hidden, weight).float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return cross_entropy(logits, target, reduction="sum", ignore_index=IGNORE_INDEX)


def linear_cross_entropy_sum(
    hidden: Any, weight: Any, target: Any, *, softcap: float | None = None, liger: bool = False
) -> Any:
    """sum over rows of CE(hidden @ weight.T, target), never holding more than one chunk's logits."""
    import torch
    from torch.utils.checkpoint import checkpoint

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
    targets = labels[..., 1:].to(hidden.device)
    keep = targets != IGNORE_INDEX
    total = linear_cross_entropy_sum(
        hidden[..., :-1, :][keep],
        self.lm_head.weight,
        targets[keep],
        softcap=softcap,
        liger=self._hipbot_liger_loss,
    )
    count = num_items if num_items is not None else keep.sum()
    if hasattr(count, "to"):
        count = count.to(total.device)
    return CausalLMOutputWithPast(loss=total / count)


def install(causal_lm: Any, *, liger: bool) -> None:
    """Replace this model instance's forward (before peft wraps it) with ``_fused_forward``."""
    causal_lm._hipbot_liger_loss = liger
    causal_lm.forward = MethodType(_fused_forward, causal_lm)
