"""The fused loss's Triton kernel, run by Triton's interpreter on the CPU (``TRITON_INTERPRET=1``):
the same losses and gradients as PyTorch's cross-entropy, with and without a soft-cap, across
several vocabulary blocks and loss chunks, an ignored row giving nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

CHECK = textwrap.dedent(
    """
    import torch
    from hipbot.jobs.finetune.fast import ce_triton, loss
    from hipbot.jobs.finetune.fast.collate import IGNORE_INDEX

    ce_triton.BLOCK = 16  # a vocabulary of 50: four blocks, the last one partly masked
    gen = torch.Generator().manual_seed(5)
    for softcap in (None, 3.0):
        logits = torch.randn(6, 50, generator=gen) * 4
        target = torch.randint(0, 50, (6,), generator=gen)
        target[2] = IGNORE_INDEX
        ref = logits.clone().requires_grad_(True)
        capped = torch.tanh(ref / softcap) * softcap if softcap else ref
        per_row = torch.nn.functional.cross_entropy(capped, target, reduction="none")
        (ref_grad,) = torch.autograd.grad(per_row.sum(), ref)
        got = torch.zeros(6)
        grad = logits.clone()
        ce_triton.xent_grad_(grad, target, got, ignore_index=IGNORE_INDEX, softcap=softcap)
        torch.testing.assert_close(got, per_row.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-6)
        assert got[2] == 0 and not grad[2].any()

    # the whole function: several loss chunks (logits at most twice the hidden states: 25 rows /
    # ceil(50 / (2 x 8)) = 4 chunks' worth, rounded to 8 rows a chunk: 4 chunks, the last one
    # short), a scaled upstream gradient
    loss.LOGITS_PER_HIDDEN = 2
    hidden = torch.randn(25, 8, generator=gen, requires_grad=True)
    weight = torch.randn(50, 8, generator=gen)
    target = torch.randint(0, 50, (25,), generator=gen)
    target[4] = IGNORE_INDEX
    assert loss.chunk_rows(25, 50, 8) == 8
    fused = loss.linear_cross_entropy_sum(hidden, weight, target, kernel=True)
    (grad,) = torch.autograd.grad(fused / 7, hidden)
    plain = torch.nn.functional.cross_entropy(hidden @ weight.T, target, reduction="sum")
    (plain_grad,) = torch.autograd.grad(plain / 7, hidden)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(grad, plain_grad, rtol=1e-4, atol=1e-5)
    print("ok")
    """
)


def test_kernel_gives_cross_entropy_and_its_gradient() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
