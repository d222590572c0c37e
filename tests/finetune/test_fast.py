"""The fast path computes what the plain path computes: each piece that runs on a CPU, checked
against transformers' own, and whole training runs compared loss by loss on a tiny Llama.
(Liger's Triton kernels need a GPU: bench/bench_finetune.py compares their losses on the device.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fixtures_finetune import job_yaml, tiny_model_dir, write_datasets

from hipbot.jobs.finetune.fast import attention, lora, loss
from hipbot.jobs.finetune.fast.checkpoint import limit_checkpointing
from hipbot.jobs.finetune.fast.collate import IGNORE_INDEX, FlatCollator, PaddedCollator, neat_pack
from hipbot.jobs.finetune.fast.loss import triton_installed
from hipbot.jobs.finetune.fast.plan import SUPPORTED, compile_layers, decide
from hipbot.jobs.finetune.memory import auto_deepspeed, checkpointed_layers, estimate
from hipbot.jobs.finetune.spec import parse_spec
from hipbot.jobs.finetune.step_log import StepLosses
from hipbot.jobs.finetune.trainer import (
    _trainer_class,
    _training_arguments,
    read_progress,
    train,
    write_job,
)

LLAMA_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}


def _spec(**extra: object):
    base = {
        "model_name_or_path": "/nowhere",
        "stage": "sft",
        "finetuning_type": "lora",
        "dataset": "a",
        "template": "llama3",
        "lora_target": "q_proj,v_proj",
        "lora_rank": 8,
        "per_device_train_batch_size": 4,
        "cutoff_len": 1024,
        "bf16": True,
    }
    return parse_spec({**base, **extra})


def test_varlen_attention_keeps_each_example_to_itself() -> None:
    gen = torch.Generator().manual_seed(1)
    lengths = [5, 9, 3]
    q = torch.randn(1, 4, sum(lengths), 8, generator=gen)
    k = torch.randn(1, 2, sum(lengths), 8, generator=gen)
    v = torch.randn(1, 2, sum(lengths), 8, generator=gen)
    cu = torch.tensor([0, 5, 14, 17], dtype=torch.int32)
    module = torch.nn.Module()
    out, _ = attention.varlen_attention(
        module, q, k, v, None, scaling=8**-0.5, cu_seq_lens_q=cu, max_length_q=9
    )
    expected = []
    for start, end in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        piece = torch.nn.functional.scaled_dot_product_attention(
            q[:, :, start:end], k[:, :, start:end], v[:, :, start:end], is_causal=True, enable_gqa=True
        )
        expected.append(piece.transpose(1, 2))
    assert out.shape == (1, 17, 4, 8)
    torch.testing.assert_close(out, torch.cat(expected, dim=1))


def test_fused_loss_matches_cross_entropy_and_its_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loss, "CHUNK_TOKENS", 7)  # several chunks, the last one short
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(30, 16, generator=gen, requires_grad=True)
    weight = torch.randn(50, 16, generator=gen)
    target = torch.randint(0, 50, (30,), generator=gen)
    target[3] = IGNORE_INDEX
    fused = loss.linear_cross_entropy_sum(hidden, weight, target)
    (grad,) = torch.autograd.grad(fused, hidden)
    plain = torch.nn.functional.cross_entropy(hidden @ weight.T, target, reduction="sum")
    (plain_grad,) = torch.autograd.grad(plain, hidden)
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close(grad, plain_grad)


def test_padding_free_batch_gives_the_padded_batch_loss() -> None:
    from transformers import AutoModelForCausalLM

    attention.register()
    model_dir = tiny_model_dir()
    padded_model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    fast_model = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation=attention.ATTN_IMPLEMENTATION
    )
    loss.install(fast_model, liger=False)
    gen = torch.Generator().manual_seed(3)
    examples = []
    for n in (11, 4, 17):
        ids = torch.randint(5, 1000, (n,), generator=gen).tolist()
        examples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * 2 + ids[2:]})
    reference = padded_model(**PaddedCollator(0)(examples)).loss
    # the collator's label positions give the boolean index's loss (no device sync)
    indexed = PaddedCollator(0, with_label_index=True)(examples)
    width = 17  # position p of a row predicts label p + 1; the first two labels are ignored
    assert indexed["label_index"].tolist() == [
        *range(1, 10),
        width + 1,
        width + 2,
        *range(2 * width + 1, 2 * width + 16),
    ]
    assert fast_model(**indexed).loss.item() == pytest.approx(reference.item(), rel=1e-5)
    assert fast_model(**FlatCollator(with_label_index=True)(examples)).loss.item() == pytest.approx(
        reference.item(), rel=1e-5
    )
    flat = FlatCollator()
    assert fast_model(**flat(examples)).loss.item() == pytest.approx(reference.item(), rel=1e-5)
    # neat packing: two rows of packed examples, attention kept inside each example
    packed = neat_pack(examples, 20)
    assert [row["seq_lens"] for row in packed] == [[17], [11, 4]]
    assert fast_model(**flat(packed)).loss.item() == pytest.approx(reference.item(), rel=1e-5)
    assert flat.tokens == 2 * 32
    # examples of one length need no padding: rows as they are, SDPA's causal kernel
    same = [{"input_ids": x["input_ids"][:4], "labels": x["labels"][:4]} for x in examples]
    rows = flat(same)
    assert rows["input_ids"].shape == (3, 4) and "cu_seq_lens_q" not in rows
    assert fast_model(**rows).loss.item() == pytest.approx(
        padded_model(**PaddedCollator(0)(same)).loss.item(), rel=1e-5
    )


@pytest.mark.parametrize("model_type", SUPPORTED)
def test_each_family_gives_the_same_loss_padding_free(model_type: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    attention.register()
    config = AutoConfig.for_model(
        model_type,
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    fast = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation=attention.ATTN_IMPLEMENTATION
    )
    fast.load_state_dict(plain.state_dict())
    loss.install(fast, liger=False)
    gen = torch.Generator().manual_seed(1)
    examples = []
    for n in (11, 4, 17):
        ids = torch.randint(5, 300, (n,), generator=gen).tolist()
        examples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * 2 + ids[2:]})
    reference = plain(**PaddedCollator(0)(examples)).loss.item()
    assert fast(**FlatCollator()(examples)).loss.item() == pytest.approx(reference, rel=1e-5)


def test_fast_training_follows_the_plain_loss_curve(tmp_path: Path) -> None:
    data = write_datasets(tmp_path / "data")
    runs = {}
    for name, fast in (("plain", False), ("fast", True)):
        spec = parse_spec(
            job_yaml(
                tiny_model_dir(),
                data,
                tmp_path / f"out-{name}",
                dataset="alpaca_demo,sharegpt_demo",
                max_steps=4,
                save_steps=100,
                hipbot_fast=fast,
            )
        )
        job_dir = write_job(tmp_path / f"job-{name}", spec, device="cpu")
        train(job_dir)
        runs[name] = read_progress(job_dir)
    assert [r["loss"] for r in runs["fast"]] == pytest.approx([r["loss"] for r in runs["plain"]], rel=1e-4)
    assert [r["grad_norm"] for r in runs["fast"]] == pytest.approx(
        [r["grad_norm"] for r in runs["plain"]], rel=1e-3
    )
    # the same real tokens: the padded path counts its attention mask, the flat path its rows
    assert [r["tokens"] for r in runs["fast"]] == [r["tokens"] for r in runs["plain"]]
    assert (tmp_path / "out-fast" / "adapter_model.safetensors").is_file()


def test_plan_honours_the_switches() -> None:
    on = decide(_spec(), "llama", on_gpu=True, liger_available=True)
    assert on.liger and on.padding_free and on.fused_loss and on.optim == "adamw_torch_fused"
    assert on.attn_implementation == attention.ATTN_IMPLEMENTATION
    assert on.residual_norm == triton_installed() and "residual adds inside" in on.describe()
    off = decide(_spec(hipbot_fast=False), "llama", on_gpu=True, liger_available=True)
    assert not off.active and off.attn_implementation is None and "hipbot_fast: false" in off.describe()
    liger_only = decide(
        _spec(hipbot_fast=False, enable_liger_kernel=True), "qwen2", on_gpu=True, liger_available=True
    )
    assert liger_only.liger and liger_only.fused_loss and not liger_only.padding_free
    other = decide(_spec(), "phi3", on_gpu=True, liger_available=True)
    assert not other.active and "'phi3' has no fast path" in other.describe()
    cpu = decide(_spec(), "llama", on_gpu=False, liger_available=True)
    assert not cpu.liger and cpu.padding_free and cpu.optim is None and "need a GPU" in cpu.describe()
    assert not cpu.residual_norm and not off.residual_norm and not liger_only.residual_norm
    # Gemma 3's layers norm four times (their own residual pattern): Liger's norms only
    assert not decide(_spec(), "gemma3_text", on_gpu=True, liger_available=True).residual_norm
    missing = decide(_spec(), "mistral", on_gpu=True, liger_available=False)
    assert not missing.liger and "pip install liger-kernel" in missing.describe()
    sdpa = decide(_spec(flash_attn="sdpa"), "llama", on_gpu=True, liger_available=True)
    assert not sdpa.padding_free and sdpa.attn_implementation == "sdpa"
    assert decide(_spec(flash_attn="disabled"), "llama", on_gpu=True).attn_implementation == "eager"
    neat = decide(_spec(neat_packing=True, hipbot_fast=False), "llama", on_gpu=False)
    assert neat.neat_packing and neat.padding_free
    z3 = decide(_spec(deepspeed="z3"), "llama", on_gpu=True, liger_available=True)
    assert not z3.fused_loss and z3.optim is None and "ZeRO-3" in z3.describe()
    assert not z3.residual_norm  # ZeRO-3 gathers a norm's weight only when the norm runs
    assert not decide(_spec(label_smoothing_factor=0.1), "llama", on_gpu=True).fused_loss
    assert decide(_spec(use_unsloth=True, hipbot_fast=False), "gemma", on_gpu=True).padding_free
    assert decide(_spec(torch_compile=True), "llama", on_gpu=True).torch_compile


def _lora_model(seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir()), dtype=torch.float32)
    # init_lora_weights=False: B is random too, so the adapters change the output
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False
    )
    return get_peft_model(model, config)


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids).loss
    out.backward()
    return out.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_fused_lora_gives_peft_loss_and_gradients() -> None:
    model = _lora_model()
    ids = torch.randint(5, 200, (2, 12), generator=torch.Generator().manual_seed(1))
    ref_loss, ref_grads = _loss_and_grads(model, ids)
    # two layers: the q/k/v group (k_proj without an adapter), o_proj, the gate/up group (no adapters)
    assert lora.fuse(model) == 2 * 6
    nodes = {}
    attention = model.base_model.model.model.layers[0].self_attn
    for name in ("q_proj", "k_proj", "v_proj"):
        getattr(attention, name).register_forward_hook(
            lambda module, args, out, name=name: nodes.__setitem__(name, out.grad_fn)
        )
    fused_loss, fused_grads = _loss_and_grads(model, ids)
    assert nodes["q_proj"] is nodes["k_proj"] is nodes["v_proj"]  # one backward node for the group
    assert fused_loss == pytest.approx(ref_loss, rel=1e-5)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-5, atol=1e-6)


def _saved_bytes(model, ids) -> int:
    """Bytes of the distinct activation storages (not weights) autograd keeps for the backward
    pass of one forward."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    return sum(storages.values())


def test_fused_lora_keeps_no_more_for_the_backward_than_peft() -> None:
    """A group of frozen linears (gate/up) keeps nothing of its input, as autograd's linear."""
    model = _lora_model()
    ids = torch.randint(5, 200, (2, 12), generator=torch.Generator().manual_seed(4))
    peft_bytes = _saved_bytes(model, ids)
    lora.fuse(model)
    assert _saved_bytes(model, ids) <= peft_bytes


def test_trainer_step_has_no_nan_sync_and_counts_flops_as_hf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No NaN/inf test of each step's loss (a device sync); HF's FLOP count, parameters counted once."""
    from transformers import Trainer

    spec = _spec()
    args = _training_arguments(spec, tmp_path / "out", "fp32", use_cpu=True)
    assert args.logging_nan_inf_filter is False
    model = _lora_model()
    trainer = _trainer_class(spec, StepLosses())(model=model, args=args)
    counted = []
    count = type(model.base_model.model).num_parameters
    monkeypatch.setattr(
        type(model.base_model.model),
        "num_parameters",
        lambda self, *a, **k: counted.append(1) or count(self, *a, **k),
    )
    for shape in ((2, 12), (3, 7)):
        inputs = {"input_ids": torch.ones(shape, dtype=torch.long)}
        assert trainer.floating_point_ops(inputs) == Trainer.floating_point_ops(trainer, inputs) > 0
    assert len(counted) == 1 + 2  # once for hipbot's Trainer, once per call for HF's
    assert trainer.floating_point_ops({"inputs_embeds": torch.ones(2, 3, 4)}) == 0


def test_fused_lora_leaves_what_it_cannot_fuse_to_peft() -> None:
    model = _lora_model()
    ids = torch.randint(5, 200, (1, 8), generator=torch.Generator().manual_seed(2))
    lora.fuse(model)
    with model.disable_adapter():  # disabled adapters: the base model's output, through peft
        fused = model(input_ids=ids).logits
    with model.disable_adapter():
        base = model.get_base_model()(input_ids=ids).logits
    torch.testing.assert_close(fused, base)


def test_compiled_layers_give_the_eager_loss_and_gradients() -> None:
    model = _lora_model()
    ids = torch.randint(5, 200, (2, 12), generator=torch.Generator().manual_seed(3))
    ref_loss, ref_grads = _loss_and_grads(model, ids)
    lora.fuse(model)
    assert compile_layers(model) == 2
    compiled_loss, compiled_grads = _loss_and_grads(model, ids)
    assert compiled_loss == pytest.approx(ref_loss, rel=1e-5)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-6)


def test_selective_checkpointing_leaves_the_other_layers_alone() -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir()))
    model.gradient_checkpointing_enable()
    assert limit_checkpointing(model, 1) == (1, 2)
    flags = [layer.gradient_checkpointing for layer in model.model.layers]
    assert sorted(flags) == [False, True]
    assert limit_checkpointing(model, 0) == (0, 2)


def test_memory_estimate_knows_the_fast_path() -> None:
    plain = estimate(_spec(hipbot_fast=False, gradient_checkpointing=False), LLAMA_8B)
    fast = estimate(_spec(gradient_checkpointing=False), LLAMA_8B)
    assert fast.logits < plain.logits / 10 and fast.activations < plain.activations
    gc = _spec(gradient_checkpointing=True)
    least = estimate(gc, LLAMA_8B)  # every layer checkpointed: the least the job needs
    # a GPU with room to spare still recomputes a fifth of the layers: the low-memory mode
    assert checkpointed_layers(gc, LLAMA_8B, 1, 140) == 6
    assert least.total < estimate(gc, LLAMA_8B, gpu_gib=140).total < fast.total
    # the fused LoRA linears keep one input for q_proj and v_proj, peft one each
    unfused = estimate(_spec(gradient_checkpointing=False, deepspeed="z3"), LLAMA_8B)
    assert unfused.activations > fast.activations
    assert checkpointed_layers(gc, LLAMA_8B, 1, 18) == 32
    some = checkpointed_layers(gc, LLAMA_8B, 1, 24)
    assert 0 < some < 32
    assert least.total < estimate(gc, LLAMA_8B, gpu_gib=24).total <= 0.85 * 24 * 2**30


def test_deepspeed_auto_picks_by_gpus_and_memory() -> None:
    spec = _spec()
    assert spec.deepspeed is None and _spec(deepspeed="auto").deepspeed is None
    assert auto_deepspeed(spec, LLAMA_8B, 1, 140) is None
    assert auto_deepspeed(spec, LLAMA_8B, 2, 140) == "z2"
    assert auto_deepspeed(spec, LLAMA_8B, 4, 16) == "z3"
    assert auto_deepspeed(spec, LLAMA_8B, 1, 16) == "z3_offload"
    assert auto_deepspeed(spec, LLAMA_8B, 2, 0) is None  # CPU ranks: plain DDP
