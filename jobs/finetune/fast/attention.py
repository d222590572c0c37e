"""Attention over padding-free batches: a batch's examples lie end to end in one row and each
attends only inside itself.

Registered in transformers' ``AttentionInterface`` as ``hipbot_varlen``. On a GPU it calls
PyTorch's own FlashAttention varlen kernel (``torch.nn.attention.varlen``, PyTorch >= 2.10, CUDA
and ROCm) with the batch's cumulative sequence lengths, so no FLOP goes to padding or to pairs of
tokens from different examples. Elsewhere (CPU, older PyTorch, attention dropout, a sliding
window shorter than the batch's longest example) it runs SDPA with the block-diagonal causal mask,
which computes the same function. A batch without sequence lengths (a padded eval batch) takes
transformers' SDPA path.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any

ATTN_IMPLEMENTATION = "hipbot_varlen"


@lru_cache(maxsize=1)
def _varlen_kernel() -> tuple[Any, frozenset[str]] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


def flash_varlen_available() -> bool:
    import torch

    return torch.cuda.is_available() and _varlen_kernel() is not None


def _masked(
    query: Any, key: Any, value: Any, cu: Any, scaling: float | None, dropout: float, window: int | None
) -> Any:
    """SDPA with the block-diagonal causal mask of the packed sequences; (1, S, H, D) out."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    pos = torch.arange(query.shape[2], device=query.device)
    doc = torch.searchsorted(cu[1:].to(query.device), pos, right=True)
    mask = (doc[:, None] == doc[None, :]) & (pos[:, None] >= pos[None, :])
    if window:
        mask &= (pos[:, None] - pos[None, :]) < window
    out = scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=mask,
        dropout_p=dropout,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2).contiguous()


def _flash(query: Any, key: Any, value: Any, cu: Any, max_len: int, scaling: float | None) -> Any:
    """PyTorch's varlen FlashAttention on (1, H, S, D) inputs; (1, S, H, D) out."""
    import torch

    fn, params = _varlen_kernel()  # type: ignore[misc]
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    head_dim = q.shape[-1]
    kwargs: dict[str, Any] = {}
    if q.shape[1] != k.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if "is_causal" in params:
        kwargs["is_causal"] = True
    else:
        kwargs["window_size"] = (-1, 0)
    if scaling is not None:
        if "scale" in params:
            kwargs["scale"] = scaling
        else:
            q = q * (scaling * head_dim**0.5)
    cu = cu.to(device=q.device, dtype=torch.int32)
    out = fn(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, max_len, max_len, **kwargs)
    return out.unsqueeze(0)


def varlen_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function contract: (batch, heads, seq, dim) in, (batch, seq, heads, dim) out."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None or query.shape[0] != 1:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    max_len = int(kwargs.get("max_length_q") or query.shape[2])
    window = kwargs.get("sliding_window") or None
    dropout = dropout if module.training else 0.0
    if query.is_cuda and _varlen_kernel() is not None and not dropout and (not window or window >= max_len):
        return _flash(query, key, value, cu, max_len, scaling), None
    return _masked(query, key, value, cu, scaling, dropout, window), None


def register() -> str:
    """Make ``hipbot_varlen`` an attention implementation transformers accepts; returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_IMPLEMENTATION, varlen_attention)
    return ATTN_IMPLEMENTATION
