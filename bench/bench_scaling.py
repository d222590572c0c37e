"""Multi-GPU scaling of the fine-tune recipe through the worker's own launch path.

A Llama-3-8B-shaped model with random weights, LoRA on q_proj,v_proj, bf16, cutoff_len 1024,
per-device batch 4, under ZeRO-2 and ZeRO-3, on 1 GPU and on N GPUs (each count in ``--gpus``):
each run is ``runner.run_child`` with ``n_procs = N``, i.e. torchrun started the way a worker starts
it for a real job. Prints tokens/s, ms/step, peak memory per GPU (rank 0's
``max_memory_allocated``) and the scaling efficiency ``tokens/s(N) / (N * tokens/s(1))``.

    python bench/bench_scaling.py --tokenizer .bench/tokenizer --gpus 1,2,4,8 --stages z2,z3 --out scaling.json

``--cpu`` runs the same launch path with gloo on the CPU and the tiny shape (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_finetune import make_dataset, make_model  # noqa: E402


def run(
    model: Path, data: Path, workdir: Path, stage: str, n: int, args: argparse.Namespace
) -> dict[str, Any]:
    from hipbot.jobs.finetune.runner import run_child
    from hipbot.jobs.finetune.spec import parse_spec
    from hipbot.jobs.finetune.trainer import write_job

    raw = {
        "model_name_or_path": str(model),
        "lora_rank": 8,
        "lora_target": "q_proj,v_proj",
        "dataset": "bench",
        "dataset_dir": str(data),
        "template": "llama3",
        "cutoff_len": args.cutoff,
        "per_device_train_batch_size": args.batch,
        "max_steps": args.steps,
        "save_steps": 100_000,
        "learning_rate": 1e-4,
        "gradient_checkpointing": args.gc,
        "output_dir": str(workdir / f"out-{stage}-{n}"),
    }
    if stage != "none":
        raw["deepspeed"] = stage
    if not args.cpu:
        raw["bf16"] = True
    spec = parse_spec(raw)
    job_dir = workdir / f"job-{stage}-{n}"
    shutil.rmtree(job_dir, ignore_errors=True)
    write_job(job_dir, spec, device="cpu" if args.cpu else "auto")
    lines: list[dict[str, Any]] = []
    output: list[str] = []
    result = run_child(job_dir, spec, n, on_progress=lines.append, on_output=output.extend)
    if result.state != "succeeded":
        print("\n".join(output[-30:]), file=sys.stderr)
        return {"error": result.error}
    gaps = [b["time"] - a["time"] for a, b in zip(lines, lines[1:], strict=False)][args.warmup :]
    ms = 1000 * statistics.median(gaps)
    tokens = n * args.batch * args.cutoff
    return {
        "ms_per_step": round(ms, 1),
        "tokens_per_s": round(tokens / ms * 1000, 1),
        "peak_gib_per_gpu": result.metrics.get("peak_memory_gib"),
        "world_size": result.metrics.get("world_size"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hipbot-scaling"))
    ap.add_argument("--gpus", default="1,2")
    ap.add_argument("--stages", default="z2,z3")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--cutoff", type=int, default=1024)
    ap.add_argument("--gc", action="store_true", help="Gradient checkpointing on (LLaMA-Factory's default).")
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU with the tiny shape (smoke test).")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.cpu:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    shape = "tiny" if args.cpu else "llama3-8b"
    model = make_model(args.workdir / f"model-{shape}", shape, args.tokenizer)
    data = make_dataset(args.workdir / "data", 256)
    counts = [int(x) for x in args.gpus.split(",")]
    results: dict[str, dict[int, Any]] = {}
    for stage in args.stages.split(","):
        results[stage] = {}
        for n in counts:
            t = time.time()
            res = run(model, data, args.workdir, stage, n, args)
            res["wall_s"] = round(time.time() - t, 1)
            results[stage][n] = res
            print(stage, n, json.dumps(res), flush=True)
            if args.out:
                args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print("\n| stage | GPUs | ms/step | tokens/s | peak GiB per GPU | scaling efficiency |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for stage, by_n in results.items():
        one = by_n.get(1, {}).get("tokens_per_s")
        for n, r in by_n.items():
            if "error" in r:
                print(f"| {stage} | {n} | failed: {str(r['error'])[-120:]} | | | |")
                continue
            eff = f"{100 * r['tokens_per_s'] / (n * one):.1f} %" if one else "-"
            print(
                f"| {stage} | {n} | {r['ms_per_step']} | {r['tokens_per_s']} | {r['peak_gib_per_gpu']} | {eff} |"
            )


if __name__ == "__main__":
    main()
