"""The memory estimate's activation and logits terms against what autograd really keeps.

The per-token coefficients in ``memory.py`` came from peaks measured on an H200; a test that only
checks the estimate of that same recipe against a band around those peaks cannot catch a wrong
formula. Here a real LoRA forward pass of small Llama models (bf16, SDPA, on the CPU) runs under
``saved_tensors_hooks``: every tensor autograd saves for the backward pass is counted once (its
storage), frozen weights apart. Two vocabulary sizes separate what the loss keeps per vocabulary
entry from what the layers keep per token, and each is compared with the estimate for that shape.
"""

from __future__ import annotations

import pytest
import torch

from hipbot.jobs.finetune.memory import LOGIT_BYTES, estimate
from hipbot.jobs.finetune.spec import parse_spec

VOCABS = (2048, 16384)


def _saved_bytes(shape: dict[str, int], vocab: int, batch: int, seq: int) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of one LoRA forward with its loss."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**shape, vocab_size=vocab, max_position_embeddings=2048, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = get_peft_model(model, lora)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, vocab, (batch, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    return sum(kept.values())


@pytest.mark.parametrize(
    "shape, batch, seq",
    [
        (dict(hidden_size=512, intermediate_size=1792, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=2), 2, 256),
        (dict(hidden_size=256, intermediate_size=896, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=4), 4, 128),
    ],
)  # fmt: skip
def test_estimate_matches_what_autograd_keeps(shape: dict[str, int], batch: int, seq: int) -> None:
    tokens = batch * seq
    small, large = (_saved_bytes(shape, v, batch, seq) for v in VOCABS)
    per_vocab_entry = (large - small) / ((VOCABS[1] - VOCABS[0]) * tokens)
    layers_kept = small - per_vocab_entry * VOCABS[0] * tokens
    spec = parse_spec(
        {"model_name_or_path": "m", "dataset": "d", "lora_target": "q_proj,v_proj", "lora_rank": 8,
         "per_device_train_batch_size": batch, "cutoff_len": seq, "gradient_checkpointing": False,
         "hipbot_fast": False}
    )  # fmt: skip
    est = estimate(spec, {**shape, "vocab_size": VOCABS[0]})
    # The layers: the estimate's activations within 20 % of what the forward pass kept.
    assert abs(est.activations - layers_kept) <= 0.2 * layers_kept, (est.activations, layers_kept)
    # The loss keeps bf16 logits and an fp32 copy (about 4-6 bytes an entry); the estimate's 12
    # also holds the gradients the backward pass makes, never less than what is kept.
    assert 2.0 <= per_vocab_entry <= LOGIT_BYTES, per_vocab_entry
    assert est.logits == pytest.approx(LOGIT_BYTES * VOCABS[0] * tokens, rel=0.01)
