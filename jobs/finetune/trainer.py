"""LoRA SFT with transformers' Trainer and peft, as one process or under torchrun / deepspeed.

The worker (or ``hipbot finetune run``) writes a job folder holding ``job.json`` and starts this
module on it, through ``launch_argv``: plain python for one device, ``torchrun`` (the
``torch.distributed.run`` module) for several GPUs or DeepSpeed. The child writes one JSON line
per optimizer step to ``progress.jsonl`` (step, loss, lr, grad_norm, tokens/s, ETA), checkpoints
to ``output/checkpoint-N`` every ``save_steps``, resumes from the last one when restarted, and
leaves in ``output/`` the adapter (``adapter_model.safetensors``, ``adapter_config.json``), the
tokenizer files, ``metrics.json`` and ``loss.png``.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from hipbot.errors import HipbotError
from hipbot.jobs.finetune.fast.collate import TOKEN_COUNT
from hipbot.jobs.finetune.fast.plan import FastPlan
from hipbot.jobs.finetune.outcome import (
    PISSA_INIT,
    RunFacts,
    finish_from_checkpoint,
    reached_target,
    resume_point,
    save_adapter,
    write_results,
)
from hipbot.jobs.finetune.spec import VLLM_MAX_LORA_RANK, JobSpec, deepspeed_config
from hipbot.jobs.finetune.step_log import StepLosses, progress_callback

log = logging.getLogger(__name__)

JOB_FILE = "job.json"
PROGRESS_FILE = "progress.jsonl"
RESULT_FILE = "result.json"


def write_job(
    job_dir: Path,
    spec: JobSpec,
    *,
    output_dir: Path | None = None,
    dataset_dir: Path | None = None,
    allow_remote_code: bool = False,
    device: str = "auto",
    resume: bool = False,
) -> Path:
    """The job folder a training child reads: spec plus where to read and write."""
    job_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "spec": spec.model_dump(),
        "output_dir": str(output_dir or Path(spec.output_dir or job_dir / "output")),
        "dataset_dir": str(dataset_dir or spec.dataset_dir),
        "allow_remote_code": allow_remote_code,
        "device": device,
        "resume": resume,
    }
    (job_dir / JOB_FILE).write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return job_dir


def launch_argv(job_dir: Path, spec: JobSpec, n_procs: int, *, master_port: int | None = None) -> list[str]:
    """The command that runs a job: torchrun for several processes or DeepSpeed, else plain python."""
    module = ["-m", "hipbot.jobs.finetune.trainer", str(job_dir)]
    if n_procs <= 1 and not spec.deepspeed:
        return [sys.executable, *module]
    rdzv = (
        ["--standalone"]
        if master_port is None
        else ["--master_addr=127.0.0.1", f"--master_port={master_port}"]
    )
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *rdzv,
        "--nnodes=1",
        f"--nproc_per_node={max(1, n_procs)}",
        *module,
    ]


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _training_arguments(
    spec: JobSpec, output_dir: Path, precision: str, use_cpu: bool, plan: FastPlan | None = None
) -> Any:
    from transformers import TrainingArguments
    from transformers.utils import is_torch_tf32_available

    params = inspect.signature(TrainingArguments.__init__).parameters
    evaluates = spec.has_eval and spec.eval_strategy != "no"
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": spec.per_device_train_batch_size,
        "per_device_eval_batch_size": spec.per_device_eval_batch_size,
        "gradient_accumulation_steps": spec.gradient_accumulation_steps,
        "eval_accumulation_steps": spec.eval_accumulation_steps,
        "learning_rate": spec.learning_rate,
        "weight_decay": spec.weight_decay,
        "adam_beta1": spec.adam_beta1,
        "adam_beta2": spec.adam_beta2,
        "adam_epsilon": spec.adam_epsilon,
        "max_grad_norm": spec.max_grad_norm,
        "label_smoothing_factor": spec.label_smoothing_factor,
        "neftune_noise_alpha": spec.neftune_noise_alpha,
        "num_train_epochs": spec.num_train_epochs,
        "max_steps": spec.max_steps,
        "lr_scheduler_type": spec.lr_scheduler_type,
        "lr_scheduler_kwargs": spec.lr_scheduler_kwargs or {},
        # transformers 5 dropped its own AdamW ("adamw_hf"): torch's has the same update
        "optim": "adamw_torch" if spec.optim == "adamw_hf" else spec.optim,
        "optim_args": spec.optim_args,
        # HF's log (log_history, the loss plot) every logging_steps; progress.jsonl still gets a
        # line per step (step_log), without the host read of the loss HF's log costs
        "logging_steps": spec.logging_steps,
        # HF's filter tests each step's loss for NaN/inf on the CPU: a device sync between the
        # backward pass and the optimizer step, which leaves the GPU idle while the Trainer's
        # Python runs (bench/README.md). Without it a diverged step logs its NaN (progress shows
        # it as no loss) instead of the running mean, 0.0 when every step is logged.
        "logging_nan_inf_filter": False,
        "save_strategy": spec.save_strategy,
        "save_steps": spec.save_steps,
        "save_total_limit": spec.save_total_limit,
        "seed": spec.seed,
        "data_seed": spec.data_seed,
        "full_determinism": spec.full_determinism,
        "bf16": precision == "bf16" and not spec.pure_bf16,
        "fp16": precision == "fp16",
        "gradient_checkpointing": spec.use_gradient_checkpointing,
        "gradient_checkpointing_kwargs": {
            "use_reentrant": bool(spec.use_reentrant_gc),
            **(spec.gradient_checkpointing_kwargs or {}),
        },
        "report_to": [],
        "disable_tqdm": True,
        "remove_unused_columns": False,
        "ddp_find_unused_parameters": bool(spec.ddp_find_unused_parameters),
        "dataloader_drop_last": spec.dataloader_drop_last,
        "use_cpu": use_cpu,
        "dataloader_pin_memory": not use_cpu,
        # pinned batches go to the GPU without waiting for the step before to finish
        "accelerator_config": {"non_blocking": not use_cpu},
        "eval_strategy": spec.eval_strategy if evaluates else "no",
        # HF evaluates every logging step when eval_steps is unset: the spec's logging_steps, not ours
        "eval_steps": spec.eval_steps or spec.logging_steps,
        "eval_delay": spec.eval_delay,
        "eval_on_start": spec.eval_on_start and evaluates,
        "load_best_model_at_end": spec.load_best_model_at_end and evaluates,
        "metric_for_best_model": spec.metric_for_best_model,
        "greater_is_better": spec.greater_is_better,
    }
    if plan is not None and plan.optim:
        kwargs["optim"] = plan.optim
    if spec.tf32 is not None and not use_cpu and is_torch_tf32_available():
        kwargs["tf32"] = spec.tf32  # TF32 exists on NVIDIA Ampere+ only; elsewhere the flag means nothing
    if "train_sampling_strategy" in params:  # transformers 5
        kwargs["train_sampling_strategy"] = (
            "sequential"
            if spec.disable_shuffling
            else "group_by_length"
            if spec.group_by_length
            else "random"
        )
    else:
        kwargs["group_by_length"] = spec.group_by_length
    if "activation_checkpointing" in params:  # transformers >= 5.2 renamed gradient checkpointing
        kwargs["activation_checkpointing"] = kwargs.pop("gradient_checkpointing")
        kwargs["activation_checkpointing_kwargs"] = kwargs.pop("gradient_checkpointing_kwargs")
    if spec.warmup_steps:
        kwargs["warmup_steps"] = spec.warmup_steps
    elif spec.warmup_ratio:
        kwargs["warmup_ratio" if "warmup_ratio" in params else "warmup_steps"] = spec.warmup_ratio
    ds_config = deepspeed_config(spec.deepspeed)
    if ds_config is not None:
        ds_config = json.loads(json.dumps(ds_config))  # a copy: HF fills in its "auto" values
        offload = ds_config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
        if offload != "none" and "optimizer" not in ds_config:
            # The Trainer's torch AdamW then steps the LoRA states on the CPU: a few million values,
            # milliseconds, and no DeepSpeedCPUAdam op to JIT-compile on every worker.
            ds_config.setdefault("zero_force_ds_cpu_optimizer", False)
        kwargs["deepspeed"] = ds_config
    if use_cpu and _world() > 1:
        kwargs["ddp_backend"] = "gloo"
    return TrainingArguments(**{k: v for k, v in kwargs.items() if k in params})


def _load_model(
    spec: JobSpec, precision: str, allow_remote_code: bool, *, attn: str | None = None, device: Any = None
) -> tuple[Any, Any]:
    """The base model and tokenizer; ``attn`` names the attention implementation, ``device`` the
    GPU to load the weights straight onto (no copy through host memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    # A job's config is data: model code from the Hub runs only where the machine's owner allows it.
    # Without that, a job that merely sets trust_remote_code still trains models transformers knows.
    remote = spec.trust_remote_code and allow_remote_code
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    if precision == "fp16":
        dtype = torch.float32 if not torch.cuda.is_available() else torch.float16
    try:
        hub = {"trust_remote_code": remote, "revision": spec.model_revision}
        config = AutoConfig.from_pretrained(spec.model_name_or_path, **hub)
        tokenizer = AutoTokenizer.from_pretrained(
            spec.model_name_or_path,
            use_fast=spec.use_fast_tokenizer,
            split_special_tokens=spec.split_special_tokens,
            **hub,
        )
        if spec.moe_aux_loss_coef is not None and hasattr(config, "router_aux_loss_coef"):
            # LLaMA-Factory's MoE setting: train with the router's load-balancing loss at this weight
            config.router_aux_loss_coef = spec.moe_aux_loss_coef
            config.output_router_logits = True
        extra: dict[str, Any] = {}
        if attn:
            extra["attn_implementation"] = attn
        if device is not None:
            extra["device_map"] = {"": device}
        model = AutoModelForCausalLM.from_pretrained(
            spec.model_name_or_path, config=config, dtype=dtype, use_safetensors=True, **hub, **extra
        )
    except ValueError as exc:
        if "trust_remote_code" not in str(exc):
            raise
        raise HipbotError(
            f"model {spec.model_name_or_path!r} needs its own Python code (trust_remote_code), "
            "which this machine does not allow",
            hint="its owner can allow it with --allow-remote-code; or pick a model transformers supports natively",
        ) from exc
    except OSError as exc:
        raise HipbotError(
            f"cannot load model {spec.model_name_or_path!r}: {exc}".splitlines()[0],
            hint="workers accept only safetensors weights: a local folder or a Hub name",
        ) from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.use_cache = False
    return model, tokenizer


def _lora(model: Any, spec: JobSpec, output_dir: Path) -> Any:
    """The trainable LoRA model: a new adapter, or the one in ``adapter_name_or_path`` to keep training.

    A PiSSA adapter (``pissa_init``) starts from the base weights' principal components; its first
    state is kept in ``output/pissa_init`` so that the result is saved as a plain LoRA (``outcome.save_adapter``).
    """
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    if spec.adapter_name_or_path:
        source = spec.adapter_name_or_path[0]
        try:
            model = PeftModel.from_pretrained(model, source, is_trainable=True)
        except (OSError, ValueError) as exc:
            raise HipbotError(
                f"cannot load adapter_name_or_path {source!r}: {exc}".splitlines()[0],
                hint="a LoRA adapter folder (adapter_config.json + adapter_model.safetensors) or a Hub name",
            ) from exc
        config = model.peft_config["default"]
        if getattr(config, "peft_type", None) != "LORA" or config.r > VLLM_MAX_LORA_RANK or config.use_dora:
            raise HipbotError(
                f"adapter_name_or_path {source!r} is not a LoRA adapter vLLM can serve "
                f"(type {config.peft_type}, rank {getattr(config, 'r', '?')}); continue a plain LoRA adapter"
            )
    else:
        targets = "all-linear" if "all" in spec.lora_target else spec.lora_target
        init: Any = True
        if spec.pissa_init:
            init = "pissa" if spec.pissa_iter == -1 else f"pissa_niter_{spec.pissa_iter}"
        config = LoraConfig(
            task_type="CAUSAL_LM",
            r=spec.lora_rank,
            lora_alpha=spec.alpha,
            lora_dropout=spec.lora_dropout,
            target_modules=targets,
            use_rslora=spec.use_rslora,
            init_lora_weights=init,
        )
        try:
            model = get_peft_model(model, config)
        except ValueError as exc:
            raise HipbotError(f"lora_target {','.join(spec.lora_target)}: {exc}".splitlines()[0]) from exc
        init_dir = output_dir / PISSA_INIT
        if spec.pissa_init and _rank() == 0 and not (init_dir / "adapter_config.json").is_file():
            model.save_pretrained(str(init_dir))
    if spec.pure_bf16:
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(torch.bfloat16)
    if spec.use_gradient_checkpointing:
        model.enable_input_require_grads()
    return model


def _trainer_class(spec: JobSpec, step_losses: StepLosses) -> Any:
    """HF's Trainer, counting the model's parameters once and keeping each step's loss on the
    device for the progress line (``step_log``), with LoRA+ parameter groups
    (``loraplus_lr_ratio``) when asked for, and the examples in order (``disable_shuffling``)
    where TrainingArguments has no sampling strategy."""
    from transformers import Trainer, TrainingArguments

    class CountOnceTrainer(Trainer):
        _flop_parameters: int | None = None

        def training_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            tokens = inputs.pop(TOKEN_COUNT, 0)
            loss = super().training_step(model, inputs, *args, **kwargs)
            step_losses.add(loss, tokens)
            return loss

        def prediction_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            inputs.pop(TOKEN_COUNT, None)
            return super().prediction_step(model, inputs, *args, **kwargs)

        def floating_point_ops(self, inputs: dict[str, Any]) -> int:
            """HF's estimate (6 x input tokens x non-embedding parameters), the parameters counted
            at the first step: HF counts them on every step, a walk over all modules and parameters
            (milliseconds of CPU on an 8B model while the GPU waits, bench/README.md)."""
            main_input = getattr(self.model, "main_input_name", "input_ids")
            if main_input not in inputs or not hasattr(self.model, "num_parameters"):
                return 0
            if self._flop_parameters is None:
                self._flop_parameters = self.model.num_parameters(exclude_embeddings=True)
            return 6 * inputs[main_input].numel() * self._flop_parameters

    base: Any = CountOnceTrainer
    if (
        spec.disable_shuffling
        and "train_sampling_strategy" not in inspect.signature(TrainingArguments).parameters
    ):

        class InOrderTrainer(base):  # type: ignore[misc,valid-type]
            def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
                from torch.utils.data import SequentialSampler

                return SequentialSampler(self.train_dataset)

        base = InOrderTrainer
    if spec.loraplus_lr_ratio is None:
        return base

    class LoraPlusTrainer(base):  # type: ignore[misc,valid-type]
        def create_optimizer(self, model: Any = None) -> Any:
            if self.optimizer is None:
                from peft.optimizers import create_loraplus_optimizer

                optimizer_cls, kwargs = base.get_optimizer_cls_and_kwargs(self.args, self.model)
                kwargs.pop("lr", None)
                self.optimizer = create_loraplus_optimizer(
                    self.model,
                    optimizer_cls,
                    lr=self.args.learning_rate,
                    loraplus_lr_ratio=spec.loraplus_lr_ratio,
                    loraplus_lr_embedding=spec.loraplus_lr_embedding,
                    loraplus_weight_decay=self.args.weight_decay,
                    **kwargs,
                )
            return self.optimizer

    return LoraPlusTrainer


def _model_and_data(
    spec: JobSpec, job: dict[str, Any], plan: FastPlan, precision: str, use_cpu: bool
) -> tuple[Any, Any, Any, Any]:
    """The LoRA model with the plan's pieces installed, the tokenizer, the examples and the collator."""
    from hipbot.jobs.finetune.datasets import build_examples
    from hipbot.jobs.finetune.fast import attention, collate
    from hipbot.jobs.finetune.fast.plan import apply, apply_after_lora

    if plan.attn_implementation == attention.ATTN_IMPLEMENTATION:
        attention.register()
    # One process per GPU without ZeRO: the weights go straight from safetensors onto that GPU.
    device = None if use_cpu or spec.deepspeed else int(os.environ.get("LOCAL_RANK", "0"))
    model, tokenizer = _load_model(
        spec, precision, job.get("allow_remote_code", False), attn=plan.attn_implementation, device=device
    )
    fused_loss = apply(plan, model)
    model = _lora(model, spec, Path(job["output_dir"]))
    apply_after_lora(plan, model)
    if plan.neat_packing:
        examples = build_examples(spec.model_copy(update={"packing": False}), tokenizer, job["dataset_dir"])
        examples.train = collate.neat_pack(examples.train, spec.cutoff_len)
    else:
        examples = build_examples(spec, tokenizer, job["dataset_dir"])
    collator = (
        collate.FlatCollator(with_label_index=fused_loss, with_token_count=True)
        if plan.padding_free
        else collate.PaddedCollator(
            tokenizer.pad_token_id, with_label_index=fused_loss, with_token_count=True
        )
    )
    return model, tokenizer, examples, collator


def train(job_dir: Path | str) -> dict[str, Any]:
    """Run the job in ``job_dir`` (see ``write_job``) in this process; return the metrics."""
    import torch
    from transformers import EarlyStoppingCallback, set_seed

    from hipbot.jobs.finetune.fast.checkpoint import selective_checkpointing
    from hipbot.jobs.finetune.fast.plan import decide
    from hipbot.jobs.finetune.gpu import detect
    from hipbot.jobs.finetune.memory import load_model_config

    job_dir = Path(job_dir)
    job = json.loads((job_dir / JOB_FILE).read_text(encoding="utf-8"))
    spec = JobSpec.model_validate(job["spec"])
    output_dir = Path(job["output_dir"])
    use_cpu = job.get("device") == "cpu" or not torch.cuda.is_available()
    info = detect()
    precision = spec.precision(bf16_supported=(not use_cpu and info.bf16))
    if use_cpu and precision == "fp16":
        precision = "fp32"
    rank, world = _rank(), _world()
    set_seed(spec.seed)
    model_config = load_model_config(spec.model_name_or_path)
    plan = decide(spec, str(model_config.get("model_type", "")), on_gpu=not use_cpu)
    if rank == 0:
        log.info("%s", plan.describe())
    args = _training_arguments(spec, output_dir, precision, use_cpu, plan)
    # Reading the device sets up the process group; DeepSpeed's own view of it must exist before
    # loading, where ZeRO-3's zero.Init reads the world size (accelerate leaves it unset on CPU).
    log.debug("rank %d of %d on %s", rank, world, args.device)
    if spec.deepspeed and use_cpu:
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")
    model, tokenizer, examples, collator = _model_and_data(spec, job, plan, precision, use_cpu)
    log_path = job_dir / (PROGRESS_FILE if rank == 0 else f"progress.rank{rank}.jsonl")

    step_losses = StepLosses()
    callbacks: list[Any] = [progress_callback(step_losses, log_path, world)]
    if plan.active and spec.use_gradient_checkpointing and not use_cpu:
        callbacks.append(selective_checkpointing(spec, model_config, world, info.memory_gib))
    if spec.early_stopping_steps:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=spec.early_stopping_steps))
    trainer = _trainer_class(spec, step_losses)(
        model=model,
        args=args,
        train_dataset=examples.train,
        eval_dataset=examples.eval or None,
        data_collator=collator,
        callbacks=callbacks,
    )
    resume = resume_point(spec, output_dir, resumed=bool(job.get("resume")))
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    finished = reached_target(resume, spec)
    if finished is None:
        result = trainer.train(resume_from_checkpoint=resume)
        trainer.save_model(str(output_dir))
        if trainer.is_world_process_zero():
            save_adapter(trainer.model, spec, output_dir)
        state, training_loss = trainer.state, result.training_loss
    else:
        state, training_loss = finished, None
        finish_from_checkpoint(trainer, model, spec, Path(resume), output_dir)
    elapsed = time.perf_counter() - started
    # Every rank evaluates (under ZeRO-3 the forward pass gathers parameters from all of them).
    evaluation = trainer.evaluate() if examples.eval and finished is None else None
    metrics: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        run = RunFacts(precision, info.describe() if not use_cpu else "cpu", _world(), elapsed)
        metrics = write_results(
            trainer, spec, tokenizer, state, training_loss, resume, run, collator, examples
        )
        if evaluation is not None:
            metrics["eval"] = evaluation
        (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
        (job_dir / RESULT_FILE).write_text(json.dumps({"ok": True, "metrics": metrics}), encoding="utf-8")
    _leave_process_group()
    return metrics


def _leave_process_group(*, together: bool = True) -> None:
    """Destroy the process group before the interpreter exits: a rank that exits still holding it
    can abort in gloo's teardown (SIGABRT, pytorch/pytorch#179291), and the launcher then kills a
    job that had finished. After a run all ranks leave together; after an error each leaves alone
    (the others may never reach a barrier)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if together:
            dist.barrier()
        dist.destroy_process_group()


def read_progress(job_dir: Path | str) -> list[dict[str, Any]]:
    path = Path(job_dir) / PROGRESS_FILE
    if not path.is_file():
        return []
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            continue  # a line being written right now
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m hipbot.jobs.finetune.trainer JOB_DIR``: a user error goes to result.json and exit status 2."""
    argv = sys.argv[1:] if argv is None else argv
    argv = [a for a in argv if not a.startswith(("--local_rank", "--local-rank"))]  # deepspeed launcher
    if len(argv) != 1:
        print("usage: python -m hipbot.jobs.finetune.trainer JOB_DIR", file=sys.stderr)
        return 2
    job_dir = Path(argv[0])
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        train(job_dir)
    except HipbotError as exc:
        if _rank() == 0:
            (job_dir / RESULT_FILE).write_text(json.dumps({"ok": False, "error": str(exc)}), encoding="utf-8")
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        _leave_process_group(together=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
