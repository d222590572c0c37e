"""What a training run leaves behind, and where a restarted run starts: the checkpoint to resume
from, the adapter of a run that had already reached its target, and the results (metrics, loss plot,
the template record serving reads, the tokenizer) written by rank 0 in ``output/``."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune import template_record
from hipbot.jobs.finetune.spec import JobSpec

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
PISSA_INIT = "pissa_init"


def last_checkpoint(output_dir: Path | str) -> Path | None:
    """The highest ``checkpoint-N`` folder that holds trainer state (a complete save)."""
    path = Path(output_dir)
    if not path.is_dir():
        return None
    found = [
        (int(m.group(1)), child)
        for child in path.iterdir()
        if (m := CHECKPOINT_RE.match(child.name)) and (child / "trainer_state.json").is_file()
    ]
    return max(found)[1] if found else None


def resume_point(spec: JobSpec, output_dir: Path, *, resumed: bool) -> str | None:
    """The checkpoint a run continues from: the spec's ``resume_from_checkpoint``, else the last one
    in ``output_dir`` when the job was restarted or may not overwrite (LLaMA-Factory's rule)."""
    last = last_checkpoint(output_dir)
    if spec.resume_from_checkpoint not in (None, False):
        if isinstance(spec.resume_from_checkpoint, str):
            return spec.resume_from_checkpoint
        return str(last) if last else None
    if last is not None and (resumed or not spec.overwrite_output_dir):
        return str(last)
    return None


def reached_target(resume: str | None, spec: JobSpec) -> Any:
    """The checkpoint's ``TrainerState`` when it already holds every step the spec asks for."""
    if not resume:
        return None
    from transformers import TrainerState

    state = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))
    if spec.max_steps > 0:
        return state if state.global_step >= spec.max_steps else None
    return state if (state.epoch or 0) >= spec.num_train_epochs else None


def save_adapter(model: Any, spec: JobSpec, output_dir: Path) -> None:
    """A PiSSA adapter is rewritten as the plain LoRA that makes the same change to the unmodified
    base (rank 2r), which is what vLLM serves; any other adapter is already saved by the Trainer."""
    if spec.pissa_init:
        model.save_pretrained(
            str(output_dir), path_initial_model_for_weight_conversion=str(output_dir / PISSA_INIT)
        )


def finish_from_checkpoint(trainer: Any, model: Any, spec: JobSpec, resume: Path, output_dir: Path) -> None:
    """The run already reached its target (the worker died while uploading the adapter): a resumed
    Trainer would take one more step, so the checkpoint's adapter is the result."""
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (resume / name).is_file():
            raise HipbotError(
                N_(
                    "{resume_name} holds no {name}: cannot finish the job from it",
                    resume_name=resume.name,
                    name=name,
                )
            )
        if trainer.is_world_process_zero():
            shutil.copy2(resume / name, output_dir / name)
    if spec.pissa_init and trainer.is_world_process_zero():
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(resume / "adapter_model.safetensors")))
        save_adapter(model, spec, output_dir)


@dataclass(frozen=True)
class RunFacts:
    """How the run went, beside what the trainer state says."""

    precision: str
    device: str
    world_size: int
    elapsed_s: float


def write_results(
    trainer: Any,
    spec: JobSpec,
    tokenizer: Any,
    state: Any,
    training_loss: float | None,
    resume: str | None,
    run: RunFacts,
    collator: Any,
    examples: Any,
) -> dict[str, Any]:
    """On rank 0: the template record and tokenizer beside the adapter, the loss plot; the metrics."""
    import torch

    output_dir = Path(trainer.args.output_dir)
    # How the examples were prompted, so serving prompts the same way; the saved tokenizer
    # carries that template too. No pickles beside the adapter: training_args.bin goes.
    record = template_record.from_training(spec, tokenizer)
    tokenizer.chat_template = record.chat_template
    tokenizer.save_pretrained(str(output_dir))
    template_record.write(output_dir, record)
    (output_dir / "training_args.bin").unlink(missing_ok=True)
    # The trainer state carries the log of earlier attempts too, so a resumed job reports and
    # plots the whole run.
    logged = [{"step": h["step"], "loss": h["loss"]} for h in state.log_history if h.get("loss") is not None]
    losses = [h["loss"] for h in logged]
    steps_run = max(1, state.global_step - (int(Path(resume).name.split("-")[-1]) if resume else 0))
    elapsed = run.elapsed_s
    on_gpu = torch.cuda.is_available()
    if logged:
        _plot(logged, output_dir / "loss.png")
    return {
        "global_step": state.global_step,
        "resumed_from": resume and Path(resume).name,
        "train_loss": training_loss if training_loss is not None else sum(losses) / max(1, len(losses)),
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "train_runtime_s": round(elapsed, 2),
        "ms_per_step": round(1000 * elapsed / steps_run, 1),
        "tokens_per_second": round(collator.tokens * run.world_size / max(elapsed, 1e-9), 1),
        "train_examples": len(examples.train),
        "skipped_records": examples.skipped,
        "precision": run.precision,
        "deepspeed": spec.deepspeed,
        "gradient_checkpointing": spec.use_gradient_checkpointing,
        "world_size": run.world_size,
        "device": run.device,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if on_gpu else None,
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2) if on_gpu else None,
    }


def _plot(logged: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in logged]
    losses = [h["loss"] for h in logged]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(steps, losses, marker="o" if len(steps) < 30 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
