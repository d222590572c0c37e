"""LoRA linears in one autograd function: the base and low-rank products in the compute dtype,
the low-rank update added into the base output by one ``addmm_``.

peft's ``Linear`` casts its input to the adapter's dtype (fp32: a copy of every LoRA input, kept
for the backward pass, and fp32 GEMMs), then adds ``lora_B(lora_A(x)) * scaling`` to the base
output in two more passes over it; the backward pass adds the gradients of the base and the
adapter paths in yet another. On the H200 recipe this takes a Liger loop from 254 to 231 ms a step
and its peak from 30.8 to 27.8 GiB (bench/README.md). Here the
forward is ``x W^T`` plus ``scaling (x A^T) B^T`` in ``x``'s dtype, saving only ``x`` (which the
adapter needs anyway) and the rank-wide ``x A^T``; the backward computes the input's gradient as
``g W`` plus ``scaling (g B) A`` in one buffer. The numbers are those of peft under autocast, which
also multiplies in the compute dtype.

A module takes peft's own forward whenever this one would differ: dropout, DoRA or another
variant, several active adapters, merged or disabled adapters, per-example adapter names.
"""

from __future__ import annotations

import logging
from types import MethodType
from typing import Any

log = logging.getLogger(__name__)


def _lora_function() -> Any:
    import torch

    class LoraLinear(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx: Any, x: Any, weight: Any, bias: Any, lora_a: Any, lora_b: Any, scaling: float
        ) -> Any:
            flat = x.reshape(-1, x.shape[-1])
            a, b = lora_a.to(x.dtype), lora_b.to(x.dtype)
            low = flat @ a.t()
            out = flat @ weight.t() if bias is None else torch.addmm(bias.to(x.dtype), flat, weight.t())
            out.addmm_(low, b.t(), alpha=scaling)
            ctx.save_for_backward(x, low, weight, a, b)
            ctx.scaling = scaling
            ctx.dtypes = (lora_a.dtype, lora_b.dtype)
            return out.view(*x.shape[:-1], out.shape[-1])

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            x, low, weight, a, b = ctx.saved_tensors
            flat_g = grad.reshape(-1, grad.shape[-1]).to(x.dtype)
            flat_x = x.reshape(-1, x.shape[-1])
            through_b = flat_g @ b  # (tokens, rank)
            grad_x = None
            if ctx.needs_input_grad[0]:
                grad_x = flat_g @ weight
                grad_x.addmm_(through_b, a, alpha=ctx.scaling)
                grad_x = grad_x.view(x.shape)
            grad_a = grad_b = None
            if ctx.needs_input_grad[3]:
                grad_a = torch.mm(through_b.t(), flat_x).mul_(ctx.scaling).to(ctx.dtypes[0])
            if ctx.needs_input_grad[4]:
                grad_b = torch.mm(flat_g.t(), low).mul_(ctx.scaling).to(ctx.dtypes[1])
            return grad_x, None, None, grad_a, grad_b, None

    return LoraLinear


_FUNCTION: Any = None


def lora_linear(x: Any, weight: Any, bias: Any, lora_a: Any, lora_b: Any, scaling: float) -> Any:
    """``x W^T + b + scaling * (x A^T) B^T``, differentiable in ``x``, ``A`` and ``B``."""
    global _FUNCTION
    if _FUNCTION is None:
        _FUNCTION = _lora_function()
    return _FUNCTION.apply(x, weight, bias, lora_a, lora_b, scaling)


def _single_adapter(module: Any) -> str | None:
    """The one plain LoRA adapter this module would apply, or None where peft must run."""
    import torch

    if module.disable_adapters or module.merged or len(module.active_adapters) != 1:
        return None
    name = module.active_adapters[0]
    if name not in module.lora_A or name in getattr(module, "lora_variant", {}):
        return None
    if module.use_dora.get(name) or not isinstance(module.lora_dropout[name], torch.nn.Identity):
        return None
    return name


def _fused_forward(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    name = None if args or kwargs else _single_adapter(self)
    if name is None:
        return type(self).forward(self, x, *args, **kwargs)
    base = self.base_layer
    return lora_linear(
        x, base.weight, base.bias, self.lora_A[name].weight, self.lora_B[name].weight, self.scaling[name]
    )


def fuse(model: Any) -> int:
    """Give each of ``model``'s peft LoRA linears (plain ``nn.Linear`` base, no ``fan_in_fan_out``)
    the fused forward; returns how many."""
    import torch
    from peft.tuners.lora.layer import Linear

    count = 0
    for module in model.modules():
        if (
            type(module) is Linear
            and type(module.base_layer) is torch.nn.Linear
            and not hasattr(module.base_layer, "_hf_hook")  # accelerate moves its weights per call
            and not module.fan_in_fan_out
            and all(
                type(m) is torch.nn.Linear and m.bias is None
                for m in (*module.lora_A.values(), *module.lora_B.values())
            )
        ):
            module.forward = MethodType(_fused_forward, module)
            count += 1
    log.debug("fused LoRA forward on %d linears", count)
    return count
