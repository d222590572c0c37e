"""The softmax cross-entropy of one chunk of logits and its gradient, in one Triton kernel.

Each program takes one row (one token) of a ``chunk x vocabulary`` logits buffer: a first pass
finds the row's log-sum-exp online, a second overwrites the logits with the gradient of the
token's loss (``softmax - onehot``, through the soft-cap's ``tanh`` when the model has one) and
writes the loss ``lse - logit[target]``. A row whose target is ignored gets a zero gradient and a
zero loss. Nothing is scaled by the number of labelled tokens, so nothing has to be counted on
the host: the caller scales the gradient by the loss's upstream gradient in the backward pass.

Triton runs on ROCm and CUDA alike; with ``TRITON_INTERPRET=1`` it runs on the CPU (the tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 32768


@triton.jit
def _tanh(z):
    return 2.0 * tl.sigmoid(2.0 * z) - 1.0


@triton.jit
def _xent_grad_kernel(
    logits_ptr,
    row_stride,
    target_ptr,
    loss_ptr,
    n_cols,
    ignore_index,
    softcap,
    HAS_SOFTCAP: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * row_stride
    y = tl.load(target_ptr + row)
    if y == ignore_index:
        for start in range(0, n_cols, BLOCK_SIZE):
            cols = start + tl.arange(0, BLOCK_SIZE)
            zero = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            tl.store(base + cols, zero.to(base.dtype.element_ty), mask=cols < n_cols)
        tl.store(loss_ptr + row, 0.0)
        return
    m = float("-inf")
    d = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        inside = cols < n_cols
        x = tl.load(base + cols, mask=inside, other=0.0).to(tl.float32)
        if HAS_SOFTCAP:
            x = softcap * _tanh(x / softcap)
        x = tl.where(inside, x, float("-inf"))
        m_new = tl.maximum(m, tl.max(x, 0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        m = m_new
    lse = m + tl.log(d)
    x_y = tl.load(base + y).to(tl.float32)
    if HAS_SOFTCAP:
        x_y = softcap * _tanh(x_y / softcap)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        inside = cols < n_cols
        x = tl.load(base + cols, mask=inside, other=0.0).to(tl.float32)
        if HAS_SOFTCAP:
            t = _tanh(x / softcap)
            p = tl.exp(softcap * t - lse)
            p = tl.where(cols == y, p - 1.0, p) * (1.0 - t * t)
        else:
            p = tl.exp(x - lse)
            p = tl.where(cols == y, p - 1.0, p)
        tl.store(base + cols, p.to(base.dtype.element_ty), mask=inside)
    tl.store(loss_ptr + row, lse - x_y)


def xent_grad_(
    logits: torch.Tensor,
    target: torch.Tensor,
    loss: torch.Tensor,
    *,
    ignore_index: int,
    softcap: float | None,
) -> None:
    """Write each row's loss into ``loss`` (fp32) and replace ``logits`` by the loss's gradient."""
    rows, cols = logits.shape
    if rows == 0:
        return
    _xent_grad_kernel[(rows,)](
        logits,
        logits.stride(0),
        target,
        loss,
        cols,
        ignore_index,
        float(softcap or 1.0),
        HAS_SOFTCAP=bool(softcap),
        BLOCK_SIZE=min(BLOCK, triton.next_power_of_2(cols)),
        num_warps=16 if torch.version.hip else 32,
    )
