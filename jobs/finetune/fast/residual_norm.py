"""Decoder layers whose residual adds run inside their RMSNorm kernels.

transformers' pre-norm decoder layer (Llama, Mistral, Qwen2, Qwen3, Gemma) is

    residual = h;  h = input_layernorm(h);  h = self_attn(h);  h = residual + h
    residual = h;  h = post_attention_layernorm(h);  h = mlp(h);  return residual + h

Each ``residual = h`` sends two gradients to ``h`` in the backward pass, which autograd sums in a
kernel of its own, and the attention's residual add is a forward kernel of its own: three passes
over the layer's activations that do nothing else (on the 8B recipe, 64 kernels in the forward
and 64 in the backward of a step, about 3 ms on the H200). Here the layer calls
``norm_triton``'s kernels: the input norm hands its input on as the residual and adds that
path's gradient to its own, and the post-attention norm does the residual add itself. The MLP's
residual add stays, as the next layer's input. The results are transformers' to the rounding of
one bf16 sum (the norm's gradient and the residual's are added in fp32 before rounding).

A layer takes transformers' own forward whenever this one could differ: eval or no-grad passes
(generation and its caches), positional arguments, a norm weight that trains, tensors off the GPU
(unless ``TRITON_INTERPRET`` runs the kernels on the CPU, as the tests do).
"""

from __future__ import annotations

import logging
import os
from types import MethodType
from typing import Any

log = logging.getLogger(__name__)

# model_type -> whether its RMSNorm is Gemma's (fp32 arithmetic, weight 1 + w)
FAMILIES = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False, "gemma": True}


def _norm_function() -> Any:
    import torch

    from hipbot.jobs.finetune.fast import norm_triton

    class ResidualRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, residual: Any, weight: Any, eps: float, gemma: bool) -> Any:
            shape = x.shape
            flat = x.reshape(-1, shape[-1]).contiguous()
            res = residual.reshape(-1, shape[-1]).contiguous() if residual is not None else None
            y, s, rstd = norm_triton.forward(flat, res, weight, eps, gemma)
            ctx.save_for_backward(s, weight, rstd)
            ctx.gemma = gemma
            ctx.has_residual = residual is not None
            # without a residual, ``s`` is the input: handed on as a view, its gradient comes back
            return y.view(*shape[:-1], y.shape[-1]), s.view(shape)

        @staticmethod
        def backward(ctx: Any, dy: Any, ds: Any) -> Any:
            s, weight, rstd = ctx.saved_tensors
            cols = s.shape[-1]
            flat_ds = ds.reshape(-1, cols).contiguous() if ds is not None else None
            grad = norm_triton.backward(
                dy.reshape(-1, cols).contiguous(), flat_ds, s, weight, rstd, ctx.gemma
            )
            grad = grad.view(dy.shape[:-1] + (cols,))
            return grad, (grad if ctx.has_residual else None), None, None, None

    return ResidualRMSNorm


_FUNCTION: Any = None


def residual_rms_norm(x: Any, residual: Any, weight: Any, eps: float, gemma: bool) -> tuple[Any, Any]:
    """``(RMSNorm(s) * weight, s)`` with ``s = x + residual`` (``s = x`` when ``residual`` is
    None), differentiable in ``x`` and ``residual`` (not in ``weight``)."""
    global _FUNCTION
    if _FUNCTION is None:
        _FUNCTION = _norm_function()
    return _FUNCTION.apply(x, residual, weight, eps, gemma)


def _eps(norm: Any) -> float:
    eps = getattr(norm, "variance_epsilon", None)
    return float(eps if eps is not None else norm.eps)


def _usable(layer: Any, hidden: Any) -> bool:
    import torch

    frozen = not (
        layer.input_layernorm.weight.requires_grad or layer.post_attention_layernorm.weight.requires_grad
    )
    here = hidden.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"
    return layer.training and torch.is_grad_enabled() and frozen and here


def _layer_forward(self: Any, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
    if args or not _usable(self, hidden_states):
        return type(self).forward(self, hidden_states, *args, **kwargs)
    gemma = self._hipbot_gemma_norm
    first, second = self.input_layernorm, self.post_attention_layernorm
    normed, residual = residual_rms_norm(hidden_states, None, first.weight, _eps(first), gemma)
    attended, _ = self.self_attn(hidden_states=normed, **kwargs)
    normed, residual = residual_rms_norm(attended, residual, second.weight, _eps(second), gemma)
    return residual + self.mlp(normed)


def fuse(model: Any, model_type: str) -> int:
    """Give each decoder layer of ``model`` (a ``model_type`` in ``FAMILIES``) the forward above;
    returns how many layers."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    gemma = FAMILIES[model_type]
    count = 0
    parts = ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")
    for module in model.modules():
        if (
            isinstance(module, GradientCheckpointingLayer)
            and all(hasattr(module, name) for name in parts)
            # accelerate's hooks (offloading) bring a norm's weight in only when the norm runs
            and not any(
                hasattr(m, "_hf_hook") for m in (module.input_layernorm, module.post_attention_layernorm)
            )
        ):
            module._hipbot_gemma_norm = gemma
            module.forward = MethodType(_layer_forward, module)
            count += 1
    log.debug("residual adds inside the norms of %d decoder layers", count)
    return count
