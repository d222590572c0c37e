"""RMSNorm with the residual add before it, forward and backward, in Triton kernels.

A decoder layer adds each block's output to the residual stream and normalizes the sum for the
next block. The forward kernel does both in one pass over a row (one token): ``s = x + r``,
written out as the new residual, and ``y = norm(s) * w``. The backward kernel adds the gradient
that reaches ``s`` through the residual path to the norm's own input gradient, so the two
gradients are never summed by a separate kernel. Without ``r`` the kernels are a plain RMSNorm
whose input gradient takes the residual path's gradient in the same way.

The weight is frozen (a LoRA job): no weight gradient is computed, so each row is one program
(Liger's RMSNorm runs one program per multiprocessor to sum the weight gradient, which leaves
memory bandwidth unused when there is none to sum). ``GEMMA`` selects Gemma's arithmetic (all in
fp32, weight ``1 + w``); otherwise Llama's (the normalized row rounded to the input's dtype,
then multiplied by the weight), as transformers computes them.

Triton runs on ROCm and CUDA alike; with ``TRITON_INTERPRET=1`` it runs on the CPU (the tests).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _row(n_cols, BLOCK_SIZE: tl.constexpr):
    """This program's row: the offsets of its values, their columns, and which are inside it."""
    cols = tl.arange(0, BLOCK_SIZE)
    return tl.program_id(0).to(tl.int64) * n_cols + cols, cols, cols < n_cols


@triton.jit
def _forward_kernel(
    n_cols,
    x_ptr,
    r_ptr,
    s_ptr,
    y_ptr,
    w_ptr,
    rstd_ptr,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    GEMMA: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    offs, cols, inside = _row(n_cols, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=inside, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(r_ptr + offs, mask=inside, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(s_ptr + offs, x, mask=inside)
    s = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(s * s, 0) / n_cols + eps)
    tl.store(rstd_ptr + tl.program_id(0), rstd)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    if GEMMA:  # noqa: SIM108 (a branch Triton resolves when it compiles)
        y = s * rstd * (1.0 + w)
    else:
        y = (s * rstd).to(x.dtype).to(tl.float32) * w
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _backward_kernel(
    n_cols,
    dy_ptr,
    ds_ptr,
    dx_ptr,
    s_ptr,
    w_ptr,
    rstd_ptr,
    HAS_DS: tl.constexpr,
    GEMMA: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    offs, cols, inside = _row(n_cols, BLOCK_SIZE)
    dy = tl.load(dy_ptr + offs, mask=inside, other=0.0)
    s = tl.load(s_ptr + offs, mask=inside, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + tl.program_id(0))
    if GEMMA:
        m = dy.to(tl.float32) * (1.0 + w)
    else:  # transformers rounds this product to the input's dtype, then casts it to fp32
        m = (dy.to(tl.float32) * w).to(s_ptr.dtype.element_ty).to(tl.float32)
    dot = tl.sum(m * s, 0)
    dx = rstd * m - (rstd * rstd * rstd * dot / n_cols) * s
    if HAS_DS:
        dx += tl.load(ds_ptr + offs, mask=inside, other=0.0).to(tl.float32)
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=inside)


def _launch(kernel: Any, rows: int, cols: int, *args: Any, **flags: Any) -> None:
    """One program per row of ``cols`` values."""
    if rows:
        block = triton.next_power_of_2(cols)
        kernel[(rows,)](cols, *args, **flags, BLOCK_SIZE=block, num_warps=max(1, min(16, block // 256)))


def forward(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float, gemma: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, s, rstd)`` for contiguous 2-D ``x`` (and ``residual``): ``s = x + residual`` (``x``
    itself without one), ``y = RMSNorm(s) * weight`` in the dtype transformers gives it."""
    rows, cols = x.shape
    out_dtype = x.dtype if gemma else torch.promote_types(x.dtype, weight.dtype)
    y = torch.empty((rows, cols), dtype=out_dtype, device=x.device)
    s = torch.empty_like(x) if residual is not None else x
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    other = residual if residual is not None else x  # not read without a residual
    flags = {"HAS_RESIDUAL": residual is not None, "GEMMA": gemma}
    _launch(_forward_kernel, rows, cols, x, other, s, y, weight, rstd, eps, **flags)
    return y, s, rstd


def backward(
    dy: torch.Tensor,
    ds: torch.Tensor | None,
    s: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    gemma: bool,
) -> torch.Tensor:
    """The gradient reaching ``s`` (and so ``x`` and the residual): the norm's input gradient for
    ``dy``, plus ``ds`` (the gradient through the residual path) when given; contiguous 2-D."""
    rows, cols = s.shape
    dx = torch.empty_like(s)
    other = ds if ds is not None else dy  # not read without ``ds``
    _launch(_backward_kernel, rows, cols, dy, other, dx, s, weight, rstd, HAS_DS=ds is not None, GEMMA=gemma)
    return dx
