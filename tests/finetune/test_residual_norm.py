"""Decoder layers with their residual adds inside hipbot's RMSNorm kernels (``fast/residual_norm``),
run by Triton's interpreter on the CPU (``TRITON_INTERPRET=1``): the same loss and gradients as
transformers' own layers for each family, in fp32 (the interpreter rounds to bf16 otherwise than a
GPU does: bf16 is checked on the GPU, bench/bench_finetune.py's loss gaps); eval passes and a norm
weight that trains take transformers' forward."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

CHECK = textwrap.dedent(
    """
    import copy
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from hipbot.jobs.finetune.fast import norm_triton, residual_norm

    calls = []
    original = norm_triton.forward
    norm_triton.forward = lambda *a: calls.append(1) or original(*a)

    def pair(model_type, dtype):
        cfg = AutoConfig.for_model(
            model_type, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=12, vocab_size=97,
        )
        torch.manual_seed(0)
        ref = AutoModelForCausalLM.from_config(cfg).to(dtype)
        for name, p in ref.named_parameters():
            if "norm" in name:  # not the initial ones (Gemma's 0 = weight 1): a real test of w
                p.data.normal_(0.0 if model_type == "gemma" else 1.0, 0.2)
            p.requires_grad_("proj" in name)
        ref.train()
        fused = copy.deepcopy(ref)
        assert residual_norm.fuse(fused, model_type) == 2
        return ref, fused

    def run(model, ids):
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        model.zero_grad(set_to_none=True)
        return out.loss.detach(), grads

    ids = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    for model_type in residual_norm.FAMILIES:
        ref, fused = pair(model_type, torch.float32)
        calls.clear()
        (want, want_grads), (got, got_grads) = run(ref, ids), run(fused, ids)
        assert len(calls) == 4, (model_type, calls)  # two norms in each of the two layers
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        for a, b in zip(got_grads, want_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)

    ref, fused = pair("llama", torch.float32)
    calls.clear()
    fused.eval()
    with torch.no_grad():
        torch.testing.assert_close(fused(input_ids=ids).logits, ref(input_ids=ids).logits)
    fused.train()
    layer = fused.model.layers[0]
    layer.post_attention_layernorm.weight.requires_grad_(True)
    run(fused, ids)
    assert layer.post_attention_layernorm.weight.grad is None  # zeroed by run(); it trained
    assert len(calls) == 2  # only the second layer took the kernels
    print("ok")
    """
)


def test_layers_give_transformers_results() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
