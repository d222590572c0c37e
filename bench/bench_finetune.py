"""GPU figures for the fine-tune recipe: a Llama-3-8B-shaped model with random weights, LoRA on
q_proj,v_proj (r=8), bf16, per-device batch 4, cutoff_len 1024.

Side by side, on the same tokenized batches in the same order: a plain transformers+peft loop
(``plain``), the same loop with Liger's kernels (``liger``) and with hipbot's fused LoRA linears
too (``liger_lora``), and hipbot's trainer through the
worker's own launch path (``runner.run_child``) with its default fast path (``hipbot``), its plain
path (``hipbot_off``: ``hipbot_fast: false``) or ``neat_packing`` (``hipbot_neat``); ``_gc``
adds gradient checkpointing, ``z2``/``z3``/``z3_offload`` DeepSpeed. Each run prints ms/step,
real tokens/s (tokens that are not padding), measured peak (``torch.cuda.max_memory_allocated``),
the memory pre-check's estimate beside it, time from launch to the first optimizer step, and the
losses (the largest gap to ``plain``'s loss at the same step).

``--data alpaca`` draws each example's length from an Alpaca-like spread (short prompts, answers
of a few words to a few hundred); ``--data full`` cuts every example at ``cutoff_len``.

    python bench/bench_finetune.py --tokenizer .bench/tokenizer --data alpaca \\
        --runs plain,plain_gc,liger,liger_gc,hipbot,hipbot_gc --steps 24 --out results.json

``--shape tiny`` runs the same pipeline on CPU-sized numbers (a smoke test of this script).
"""

from __future__ import annotations

import argparse
import json
import math
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
# the bare loop: (Liger's kernels, hipbot's fused LoRA linears)
LOOPS = {"plain": (False, False), "liger": (True, False), "liger_lora": (True, True)}
HIPBOT = {  # the spec keys of each hipbot run
    "hipbot": {},
    "hipbot_off": {"hipbot_fast": False},
    "hipbot_log1": {"logging_steps": 1},  # HF's log (a host read of the loss) on every step
    "hipbot_neat": {"neat_packing": True},
    "hipbot_compile": {"torch_compile": True},
    "z2": {"deepspeed": "z2"},
    "z3": {"deepspeed": "z3"},
    "z3_offload": {"deepspeed": "z3_offload"},
}
WORDS = [
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


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n)))


def make_dataset(dest: Path, records: int, lengths: str = "full") -> Path:
    """Alpaca records: ``full`` ones long enough to be cut at any cutoff_len; ``alpaca`` ones whose
    word counts follow Alpaca's spread (log-normal: instruction median 13 words, an input in 40 %
    of the records, answers median 60 words with a long tail, at most 900)."""
    rng = random.Random(0)
    rows = []
    for _ in range(records):
        if lengths == "full":
            rows.append({"instruction": _words(rng, 60), "input": "", "output": _words(rng, 1400)})
            continue
        rows.append(
            {
                "instruction": _words(rng, int(rng.lognormvariate(math.log(13), 0.5))),
                "input": _words(rng, int(rng.lognormvariate(math.log(12), 1.0)))
                if rng.random() < 0.4
                else "",
                "output": _words(rng, min(900, int(rng.lognormvariate(math.log(60), 1.0)))),
            }
        )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "bench.json").write_text(json.dumps(rows), encoding="utf-8")
    (dest / "dataset_info.json").write_text(
        json.dumps({"bench": {"file_name": "bench.json"}}), encoding="utf-8"
    )
    return dest


def job_spec(model: Path, data: Path, out: Path, run: str, steps: int, batch: int, cutoff: int) -> Any:
    from hipbot.jobs.finetune.spec import parse_spec

    name, gc = (run[:-3], True) if run.endswith("_gc") else (run, False)
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
        "logging_steps": 10,  # LLaMA-Factory's examples; progress.jsonl still has every step
        "bf16": True,
        "gradient_checkpointing": gc,
        "disable_shuffling": True,  # the loops take the examples in order: the same batches
        "output_dir": str(out),
        **HIPBOT.get(name, {}),
    }
    return parse_spec(raw)


def _timed(times: list[float], tokens: list[int], warmup: int) -> dict[str, float]:
    """Mean step time and real tokens/s over the steps after ``warmup`` (lengths vary per step)."""
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)][warmup:]
    counted = tokens[1:][warmup:]
    if not gaps:
        return {"ms_per_step": float("nan"), "tokens_per_s": float("nan")}
    return {
        "ms_per_step": round(1000 * sum(gaps) / len(gaps), 1),
        "median_ms": round(1000 * statistics.median(gaps), 1),
        "tokens_per_s": round(sum(counted) / sum(gaps), 1),
    }


def _timed_hipbot(lines: list[dict[str, Any]], warmup: int) -> dict[str, float]:
    """hipbot's progress lines are written a step late (no device sync), except on the steps HF
    logs, which sync: time between the first and last of those after ``warmup`` when there are two,
    else every line."""
    synced = [x for x in lines if x.get("grad_norm") is not None and x["step"] > warmup]
    if len(synced) < 2:
        return _timed([x["time"] for x in lines], [x["tokens"] for x in lines], warmup)
    first, last = synced[0], synced[-1]
    seconds = last["time"] - first["time"]
    tokens = sum(x["tokens"] for x in lines if first["step"] < x["step"] <= last["step"])
    steps = last["step"] - first["step"]
    return {
        "ms_per_step": round(1000 * seconds / steps, 1),
        "median_ms": float("nan"),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def run_hipbot(spec: Any, job_dir: Path, warmup: int) -> dict[str, Any]:
    from hipbot.jobs.finetune.runner import run_child
    from hipbot.jobs.finetune.trainer import write_job

    shutil.rmtree(job_dir, ignore_errors=True)
    shutil.rmtree(spec.output_dir, ignore_errors=True)  # else a rerun resumes the finished job
    write_job(job_dir, spec)
    lines: list[dict[str, Any]] = []
    output: list[str] = []
    launched = time.time()
    result = run_child(job_dir, spec, 1, on_progress=lines.append, on_output=output.extend)
    if result.state != "succeeded":
        print("\n".join(output[-30:]), file=sys.stderr)
        return {"error": result.error}
    m = result.metrics
    return {
        **_timed_hipbot(lines, warmup),
        "first_step_s": round(lines[0]["time"] - launched, 1),
        "peak_gib": m.get("peak_memory_gib"),
        "reserved_gib": m.get("peak_reserved_gib"),
        "losses": [x["loss"] for x in lines],
        "plan": " / ".join(
            x.split(": ", 1)[-1] for x in output if "fast path:" in x or "checkpointing:" in x
        ),
    }


def loop(
    model: str,
    data: str,
    steps: int,
    batch: int,
    cutoff: int,
    gc: bool,
    pieces: tuple[bool, bool],
    warmup: int,
) -> dict:
    """Plain transformers + peft: load bf16, wrap LoRA, AdamW, loop (``pieces``: Liger's kernels
    first, hipbot's fused LoRA linears after peft)."""
    launched = time.time()
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hipbot.jobs.finetune.datasets import build_examples
    from hipbot.jobs.finetune.fast.collate import PaddedCollator

    spec = job_spec(Path(model), Path(data), Path("/tmp/unused"), "plain", steps, batch, cutoff)
    tok = AutoTokenizer.from_pretrained(model)
    examples = build_examples(spec, tok, data).train
    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).cuda()
    liger, fused_lora = pieces
    if liger:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(model=m)
    m.config.use_cache = False
    m.train()  # from_pretrained returns eval mode, where HF skips gradient checkpointing
    if gc:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        m.enable_input_require_grads()
    m = get_peft_model(
        m, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    )
    if fused_lora:
        from hipbot.jobs.finetune.fast.lora import fuse

        fuse(m)
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)
    collate = PaddedCollator(tok.pad_token_id or tok.eos_token_id)
    torch.cuda.reset_peak_memory_stats()
    times, tokens, losses = [], [], []
    for step in range(steps):
        before = collate.tokens
        inputs = {k: v.cuda() for k, v in collate(examples[step * batch : (step + 1) * batch]).items()}
        loss = m(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in m.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        times.append(time.time())
        tokens.append(collate.tokens - before)
    return {
        **_timed(times, tokens, warmup),
        "first_step_s": round(times[0] - launched, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
        "losses": losses,
    }


def _run_loop(args: argparse.Namespace, run: str, model: Path, data: Path, steps: int) -> dict[str, Any]:
    """A loop run in its own process, so that each run starts with an empty GPU."""
    cmd = [sys.executable, __file__, "--loop-child", run, str(model), str(data)]
    cmd += ["--steps", str(steps), "--batch", str(args.batch), "--cutoff", str(args.cutoff)]
    cmd += ["--warmup", str(args.warmup)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(found[-1][7:]) if found else {"error": proc.stderr[-2000:]}


def _gaps(run: str, r: dict[str, Any], results: dict[str, Any]) -> tuple[float, float]:
    """Loss gap at step 1 to ``plain`` (same weights, same batch: the kernels' numerics), and the
    largest gap over the run to the run with the same optimizer loop (``plain`` for the loops,
    ``hipbot_off`` for hipbot's trainer, whose learning rate decays)."""
    nan = float("nan")
    if "neat" in run:
        return nan, nan
    first = results.get("plain", {}).get("losses") or []
    ref_name = "plain" if run.removesuffix("_gc") in LOOPS else "hipbot_off"
    ref = results.get(ref_name, {}).get("losses") or []
    step1 = abs(r["losses"][0] - first[0]) if first else nan
    worst = max((abs(a - b) for a, b in zip(r["losses"], ref, strict=False)), default=nan) if ref else nan
    return step1, worst


def _table(results: dict[str, Any]) -> None:
    print(
        "\n| run | ms/step | real tokens/s | vs plain | peak GiB | estimate GiB | error | first step s "
        "| loss gap step 1 | max loss gap |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    plain = results.get("plain", {})
    for run, r in results.items():
        if "ms_per_step" not in r:
            print(f"| {run} | failed: {str(r.get('error'))[-200:]} |")
            continue
        speed = r["tokens_per_s"] / plain["tokens_per_s"] if plain.get("tokens_per_s") else float("nan")
        step1, worst = _gaps(run, r, results)
        print(
            f"| {run} | {r['ms_per_step']} | {r['tokens_per_s']} | {speed:.2f}x | {r.get('peak_gib')} "
            f"| {r['estimate_gib']} | {r.get('estimate_error_pct')} % | {r.get('first_step_s')} "
            f"| {step1:.4f} | {worst:.4f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, required=False)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hipbot-bench"))
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--data", choices=("alpaca", "full"), default="alpaca")
    ap.add_argument("--runs", default="plain,plain_gc,liger,liger_gc,hipbot,hipbot_gc")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--offload-steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--cutoff", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--loop-child", nargs=3, metavar=("RUN", "MODEL", "DATA"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.loop_child:
        run, model_dir, data_dir = args.loop_child
        name = run.removesuffix("_gc")
        res = loop(
            model_dir,
            data_dir,
            args.steps,
            args.batch,
            args.cutoff,
            run.endswith("_gc"),
            LOOPS[name],
            args.warmup,
        )
        print("RESULT " + json.dumps(res))
        return

    from hipbot.jobs.finetune.gpu import detect
    from hipbot.jobs.finetune.memory import estimate, load_model_config

    t0 = time.time()
    model = make_model(args.workdir / f"model-{args.shape}", args.shape, args.tokenizer)
    data = make_dataset(args.workdir / f"data-{args.data}", 64 * args.batch, args.data)
    print(f"model + data ready in {time.time() - t0:.0f}s", flush=True)
    config = load_model_config(model)
    gpu_gib = detect().memory_gib or None
    results: dict[str, Any] = {}
    for run in args.runs.split(","):
        steps = args.offload_steps if "offload" in run else args.steps
        spec = job_spec(model, data, args.workdir / f"out-{run}", run, steps, args.batch, args.cutoff)
        t = time.time()
        if run.removesuffix("_gc") in LOOPS:
            res = _run_loop(args, run, model, data, steps)
        else:
            res = run_hipbot(spec, args.workdir / f"job-{run}", args.warmup)
        # a loop's estimate is the plain path's (Liger's kernels come closest to the fast path's)
        loop_name = run.removesuffix("_gc")
        if loop_name in LOOPS:
            spec = spec.model_copy(
                update={"hipbot_fast": False, "enable_liger_kernel": LOOPS[loop_name][0] or None}
            )
        # the loops checkpoint every layer; hipbot only what this GPU needs
        est = estimate(spec, config, 1, precision="bf16", gpu_gib=None if loop_name in LOOPS else gpu_gib)
        res["estimate_gib"] = round(est.total_gib, 2)
        res["estimate_parts"] = est.as_dict()
        if res.get("peak_gib"):
            res["estimate_error_pct"] = round(
                100 * (res["estimate_gib"] - res["peak_gib"]) / res["peak_gib"], 1
            )
        res["wall_s"] = round(time.time() - t, 1)
        results[run] = res
        print(
            run,
            json.dumps({k: v for k, v in res.items() if k not in ("losses", "estimate_parts")}),
            flush=True,
        )
        if args.out:
            args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    _table(results)


if __name__ == "__main__":
    main()
