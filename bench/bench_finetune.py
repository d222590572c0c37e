"""GPU figures for the fine-tune recipe: a Llama-3-8B-shaped model with random weights, LoRA on
q_proj,v_proj (r=8), bf16, per-device batch 4, cutoff_len 1024.

Each hipbot run goes through the worker's own launch path (``runner.run_child``: plain python
without DeepSpeed, torchrun with it); the baseline is a plain transformers+peft loop on the same
tokenized batches. Prints ms/step, tokens/s, measured peak (``torch.cuda.max_memory_allocated``)
and the memory pre-check's estimate beside it, and writes everything as JSON.

    python bench/bench_finetune.py --tokenizer .bench/tokenizer --workdir /tmp/bench \\
        --runs baseline,none,none_gc,z3,z3_offload --steps 12 --out results.json

``--shape tiny`` runs the same pipeline on CPU-sized numbers (a smoke test of this script).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SHAPES = {
    # Meta-Llama-3-8B's config.json numbers.
    "llama3-8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 49152,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    },
}
RUNS = {
    "baseline": {"deepspeed": None, "gradient_checkpointing": False},
    "baseline_gc": {"deepspeed": None, "gradient_checkpointing": True},
    "none": {"deepspeed": None, "gradient_checkpointing": False},
    "none_gc": {"deepspeed": None, "gradient_checkpointing": True},
    "z2": {"deepspeed": "z2", "gradient_checkpointing": False},
    "z3": {"deepspeed": "z3", "gradient_checkpointing": False},
    "z3_gc": {"deepspeed": "z3", "gradient_checkpointing": True},
    "z3_offload": {"deepspeed": "z3_offload", "gradient_checkpointing": False},
    "z3_offload_gc": {"deepspeed": "z3_offload", "gradient_checkpointing": True},
}


def make_model(dest: Path, shape: str, tokenizer: Path) -> Path:
    """Random weights in safetensors shards, written straight from tensors (no 8B-parameter module)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if (dest / "config.json").is_file():
        return dest
    tok = AutoTokenizer.from_pretrained(str(tokenizer))
    config = LlamaConfig(**SHAPES[shape], bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(0)
    dest.mkdir(parents=True, exist_ok=True)
    shard: dict[str, Any] = {}
    size, index, n = 0, {}, 0
    limit = 4 * 2**30

    def flush() -> None:
        nonlocal shard, size, n
        if not shard:
            return
        n += 1
        name = f"model-{n:05d}.safetensors"
        save_file(shard, str(dest / name), metadata={"format": "pt"})
        index.update({k: name for k in shard})
        shard, size = {}, 0

    for name, p in skeleton.state_dict().items():
        if name.endswith("norm.weight"):
            t = torch.ones(p.shape, dtype=torch.bfloat16, device=device)
        else:
            t = torch.randn(p.shape, dtype=torch.bfloat16, device=device, generator=gen) * 0.02
        shard[name] = t.cpu()
        size += t.numel() * 2
        if size >= limit:
            flush()
    flush()
    total = sum(p.numel() * 2 for p in skeleton.state_dict().values())
    (dest / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}), encoding="utf-8"
    )
    config.save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest


def make_dataset(dest: Path, records: int) -> Path:
    """Alpaca records long enough that every example is cut at cutoff_len (full batches)."""
    rng = random.Random(0)
    words = [
        "kernel",
        "device",
        "memory",
        "stream",
        "warp",
        "wavefront",
        "thread",
        "block",
        "grid",
        "launch",
        "hip",
        "cuda",
        "rocm",
        "buffer",
        "copy",
        "event",
        "atomic",
        "shared",
        "global",
        "register",
    ]
    rows = [
        {
            "instruction": " ".join(rng.choice(words) for _ in range(60)),
            "input": "",
            "output": " ".join(rng.choice(words) for _ in range(1400)),
        }
        for _ in range(records)
    ]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "bench.json").write_text(json.dumps(rows), encoding="utf-8")
    (dest / "dataset_info.json").write_text(
        json.dumps({"bench": {"file_name": "bench.json"}}), encoding="utf-8"
    )
    return dest


def job_spec(model: Path, data: Path, out: Path, run: str, steps: int, batch: int, cutoff: int) -> Any:
    from hipbot.jobs.finetune.spec import parse_spec

    cfg = RUNS[run]
    raw = {
        "model_name_or_path": str(model),
        "stage": "sft",
        "finetuning_type": "lora",
        "lora_rank": 8,
        "lora_target": "q_proj,v_proj",
        "dataset": "bench",
        "dataset_dir": str(data),
        "template": "llama3",
        "cutoff_len": cutoff,
        "per_device_train_batch_size": batch,
        "learning_rate": 1e-4,
        "max_steps": steps,
        "save_steps": 10_000,
        "logging_steps": 1,
        "bf16": True,
        "gradient_checkpointing": cfg["gradient_checkpointing"],
        "output_dir": str(out),
    }
    if cfg["deepspeed"]:
        raw["deepspeed"] = cfg["deepspeed"]
    return parse_spec(raw)


def _step_ms(times: list[float], warmup: int) -> float:
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)][warmup:]
    return 1000 * statistics.median(gaps) if gaps else float("nan")


def run_hipbot(spec: Any, job_dir: Path, warmup: int) -> dict[str, Any]:
    from hipbot.jobs.finetune.runner import run_child
    from hipbot.jobs.finetune.trainer import write_job

    shutil.rmtree(job_dir, ignore_errors=True)
    write_job(job_dir, spec)
    lines: list[dict[str, Any]] = []
    output: list[str] = []
    result = run_child(job_dir, spec, 1, on_progress=lines.append, on_output=output.extend)
    if result.state != "succeeded":
        print("\n".join(output[-30:]), file=sys.stderr)
        return {"error": result.error}
    times = [line["time"] for line in lines]
    ms = _step_ms(times, warmup)
    tokens = spec.per_device_train_batch_size * spec.cutoff_len
    m = result.metrics
    return {
        "ms_per_step": round(ms, 1),
        "tokens_per_s": round(tokens / ms * 1000, 1),
        "peak_gib": m.get("peak_memory_gib"),
        "reserved_gib": m.get("peak_reserved_gib"),
        "first_loss": m.get("first_loss"),
        "final_loss": m.get("final_loss"),
    }


def baseline(
    model: str, data: str, steps: int, batch: int, cutoff: int, gc: bool, warmup: int
) -> dict[str, Any]:
    """Plain transformers + peft: load bf16, wrap LoRA, AdamW, loop. Same tokenized examples."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hipbot.jobs.finetune.datasets import build_examples
    from hipbot.jobs.finetune.trainer import _Collator

    spec = job_spec(Path(model), Path(data), Path("/tmp/unused"), "none", steps, batch, cutoff)
    tok = AutoTokenizer.from_pretrained(model)
    examples = build_examples(spec, tok, data).train
    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).cuda()
    m.config.use_cache = False
    m.train()  # from_pretrained returns eval mode, where HF skips gradient checkpointing
    if gc:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        m.enable_input_require_grads()
    m = get_peft_model(
        m, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    )
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)
    collate = _Collator(tok.pad_token_id or tok.eos_token_id)
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(steps):
        batch_rows = [examples[(step * batch + i) % len(examples)] for i in range(batch)]
        inputs = {k: v.cuda() for k, v in collate(batch_rows).items()}
        loss = m(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in m.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        times.append(time.time())
    ms = _step_ms(times, warmup)
    return {
        "ms_per_step": round(ms, 1),
        "tokens_per_s": round(batch * cutoff / ms * 1000, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, required=False)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hipbot-bench"))
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--runs", default="baseline,none,none_gc,z3,z3_offload")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--offload-steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--cutoff", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--baseline-child", nargs=2, metavar=("MODEL", "DATA"), help=argparse.SUPPRESS)
    ap.add_argument("--gc", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_child:
        res = baseline(*args.baseline_child, args.steps, args.batch, args.cutoff, args.gc, args.warmup)
        print("RESULT " + json.dumps(res))
        return

    from hipbot.jobs.finetune.memory import estimate, load_model_config

    t0 = time.time()
    model = make_model(args.workdir / f"model-{args.shape}", args.shape, args.tokenizer)
    data = make_dataset(args.workdir / "data", 64)
    print(f"model + data ready in {time.time() - t0:.0f}s", flush=True)
    config = load_model_config(model)
    results: dict[str, Any] = {}
    for run in args.runs.split(","):
        steps = args.offload_steps if "offload" in run else args.steps
        spec = job_spec(model, data, args.workdir / f"out-{run}", run, steps, args.batch, args.cutoff)
        t = time.time()
        if run.startswith("baseline"):
            cmd = [
                sys.executable,
                __file__,
                "--baseline-child",
                str(model),
                str(data),
                "--steps",
                str(steps),
                "--batch",
                str(args.batch),
                "--cutoff",
                str(args.cutoff),
                "--warmup",
                str(args.warmup),
            ]
            proc = subprocess.run(
                cmd + (["--gc"] if RUNS[run]["gradient_checkpointing"] else []),
                capture_output=True,
                text=True,
            )
            found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            res = json.loads(found[-1][7:]) if found else {"error": proc.stderr[-2000:]}
        else:
            res = run_hipbot(spec, args.workdir / f"job-{run}", args.warmup)
        res["estimate_gib"] = round(estimate(spec, config, 1, precision="bf16").total_gib, 2)
        res["estimate_parts"] = estimate(spec, config, 1, precision="bf16").as_dict()
        if res.get("peak_gib"):
            res["estimate_error_pct"] = round(
                100 * (res["estimate_gib"] - res["peak_gib"]) / res["peak_gib"], 1
            )
        res["wall_s"] = round(time.time() - t, 1)
        results[run] = res
        print(run, json.dumps(res), flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print("\n| run | ms/step | tokens/s | peak GiB (allocated) | reserved GiB | estimate GiB | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for run, r in results.items():
        if "error" in r and "ms_per_step" not in r:
            print(f"| {run} | failed: {str(r['error'])[-200:]} |")
            continue
        print(
            f"| {run} | {r['ms_per_step']} | {r['tokens_per_s']} | {r.get('peak_gib')} | {r.get('reserved_gib')} "
            f"| {r['estimate_gib']} | {r.get('estimate_error_pct')} % |"
        )


if __name__ == "__main__":
    main()
