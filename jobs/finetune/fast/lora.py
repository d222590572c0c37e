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

Linears of one module that read the same input (an attention's ``q_proj``/``k_proj``/``v_proj``,
an MLP's ``gate_proj``/``up_proj``), with or without an adapter, are one group: the first member
called computes every member's output and the others take theirs, so the backward pass adds all
their input gradients into one buffer (``addmm_``) where autograd would sum them in a kernel per
extra member (96 a step on the 8B recipe).

A module takes peft's own forward whenever this one would differ: dropout, DoRA or another
variant, several active adapters, merged or disabled adapters, per-example adapter names; a group
member called with another input than the group's, or under ``torch.compile``, runs alone.
"""

from __future__ import annotations

import logging
from types import MethodType
from typing import Any

log = logging.getLogger(__name__)

# the sibling linears that read the same input, in the decoder layers of the supported families
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def _group_function() -> Any:
    import torch

    class LinearGroup(torch.autograd.Function):
        """Linears reading one input ``x``; each member's tensors are (weight, bias, A, B), A and B
        None for a frozen linear without an adapter, its scaling None then."""

        @staticmethod
        def forward(ctx: Any, x: Any, scalings: tuple[float | None, ...], *tensors: Any) -> Any:
            flat = x.reshape(-1, x.shape[-1])
            # the input only for the adapters' gradients: frozen linears alone keep nothing of it,
            # as autograd's own linear does (their input gradient needs only the weight)
            outs, saved, dtypes = [], [x if any(s is not None for s in scalings) else None], []
            for i, scaling in enumerate(scalings):
                weight, bias, lora_a, lora_b = tensors[4 * i : 4 * i + 4]
                out = flat @ weight.t() if bias is None else torch.addmm(bias.to(x.dtype), flat, weight.t())
                a = b = low = None
                if scaling is not None:
                    a, b = lora_a.to(x.dtype), lora_b.to(x.dtype)
                    low = flat @ a.t()
                    out.addmm_(low, b.t(), alpha=scaling)
                    dtypes.append((lora_a.dtype, lora_b.dtype))
                else:
                    dtypes.append(None)
                saved += [weight, a, b, low]
                outs.append(out.view(*x.shape[:-1], out.shape[-1]))
            ctx.save_for_backward(*saved)
            ctx.scalings, ctx.dtypes, ctx.x_meta = scalings, dtypes, (x.shape, x.dtype)
            return tuple(outs)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            x, *saved = ctx.saved_tensors
            shape, dtype = ctx.x_meta
            grad_x = None
            result: list[Any] = [None, None]
            for i, (grad, scaling) in enumerate(zip(grads, ctx.scalings, strict=True)):
                weight, a, b, low = saved[4 * i : 4 * i + 4]
                flat_g = grad.reshape(-1, grad.shape[-1]).to(dtype)
                if ctx.needs_input_grad[0]:  # every member's input gradient into one buffer
                    if grad_x is None:
                        grad_x = flat_g @ weight
                    else:
                        grad_x.addmm_(flat_g, weight)
                grad_a = grad_b = None
                if scaling is not None:
                    through_b = flat_g @ b  # (tokens, rank)
                    if grad_x is not None:
                        grad_x.addmm_(through_b, a, alpha=scaling)
                    if ctx.needs_input_grad[4 + 4 * i]:
                        flat_x = x.reshape(-1, shape[-1])
                        grad_a = torch.mm(through_b.t(), flat_x).mul_(scaling).to(ctx.dtypes[i][0])
                    if ctx.needs_input_grad[5 + 4 * i]:
                        grad_b = torch.mm(flat_g.t(), low).mul_(scaling).to(ctx.dtypes[i][1])
                result += [None, None, grad_a, grad_b]
            result[0] = grad_x.view(shape) if grad_x is not None else None
            return tuple(result)

    return LinearGroup


_FUNCTION: Any = None


def _apply(x: Any, members: list[tuple[Any, Any, Any, Any, float | None]]) -> tuple[Any, ...]:
    global _FUNCTION
    if _FUNCTION is None:
        _FUNCTION = _group_function()
    tensors = [t for weight, bias, a, b, _ in members for t in (weight, bias, a, b)]
    return _FUNCTION.apply(x, tuple(m[4] for m in members), *tensors)


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


def _member(module: Any) -> tuple[Any, Any, Any, Any, float | None] | None:
    """What ``module`` multiplies by in this call (weight, bias, A, B, scaling), or None where it
    must take its own forward (peft's; a plain linear whose weight trains)."""
    import torch

    if type(module) is torch.nn.Linear:
        return None if module.weight.requires_grad else (module.weight, module.bias, None, None, None)
    name = _single_adapter(module)
    if name is None:
        return None
    base = module.base_layer
    return (
        base.weight,
        base.bias,
        module.lora_A[name].weight,
        module.lora_B[name].weight,
        module.scaling[name],
    )


class _Group:
    """Sibling linears reading one input: the outputs computed for the others, until taken."""

    def __init__(self, modules: list[Any]) -> None:
        self.modules = modules
        self.input: Any = None
        self.pending: dict[int, Any] = {}

    def output(self, module: Any, x: Any) -> Any:
        if x is self.input and id(module) in self.pending:
            out = self.pending.pop(id(module))
            if not self.pending:
                self.input = None
            return out
        members = [_member(m) for m in self.modules]
        if any(m is None for m in members):
            return None
        outs = _apply(x, members)  # type: ignore[arg-type]
        self.input = x
        self.pending = {id(m): o for m, o in zip(self.modules, outs, strict=True) if m is not module}
        return outs[self.modules.index(module)]


def _fused_forward(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    import torch

    group = getattr(self, "_hipbot_group", None)
    if group is not None and not (args or kwargs) and not torch.compiler.is_compiling():
        out = group.output(self, x)
        if out is not None:
            return out
    member = None if args or kwargs or type(self) is torch.nn.Linear else _member(self)
    if member is None:
        return type(self).forward(self, x, *args, **kwargs)
    return _apply(x, [member])[0]


def _fusable(module: Any) -> bool:
    import torch
    from peft.tuners.lora.layer import Linear

    if type(module) is torch.nn.Linear:
        return not hasattr(module, "_hf_hook")
    return (
        type(module) is Linear
        and type(module.base_layer) is torch.nn.Linear
        and not hasattr(module.base_layer, "_hf_hook")  # accelerate moves its weights per call
        and not module.fan_in_fan_out
        and all(
            type(m) is torch.nn.Linear and m.bias is None
            for m in (*module.lora_A.values(), *module.lora_B.values())
        )
    )


def fuse(model: Any) -> int:
    """Give each of ``model``'s peft LoRA linears (plain ``nn.Linear`` base, no ``fan_in_fan_out``)
    and each sibling group of ``GROUPS`` the fused forward; returns how many linears."""
    from peft.tuners.lora.layer import Linear

    fused: set[int] = set()
    for parent in model.modules():
        for names in GROUPS:
            siblings = [getattr(parent, name, None) for name in names]
            if all(m is not None and _fusable(m) for m in siblings):
                group = _Group(siblings)
                for module in siblings:
                    module._hipbot_group = group
                    module.forward = MethodType(_fused_forward, module)
                    fused.add(id(module))
    for module in model.modules():
        if type(module) is Linear and id(module) not in fused and _fusable(module):
            module.forward = MethodType(_fused_forward, module)
            fused.add(id(module))
    log.debug("fused forward on %d linears", len(fused))
    return len(fused)
