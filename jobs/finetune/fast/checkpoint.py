"""Selective gradient checkpointing: recompute only as many decoder layers as the GPU needs.

transformers checkpoints every decoder layer once gradient checkpointing is on, which costs about
a third of a LoRA step (the backward pass of frozen weights is as cheap as the forward, so one
more forward is a large share). The fast path keeps checkpointing on the layers
``memory.checkpointed_layers`` says the job's GPU must recompute to fit, spread evenly over the
depth, and lets the others keep their activations.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)


def limit_checkpointing(model: Any, layers: int) -> tuple[int, int]:
    """Leave checkpointing on for ``layers`` of the model's decoder layers (evenly spaced), off
    for the rest; returns (checkpointed, total). Call after transformers turned checkpointing on."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    found = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    total = len(found)
    keep = max(0, min(layers, total))
    chosen = {round((i + 0.5) * total / keep - 0.5) for i in range(keep)} if keep else set()
    for index, layer in enumerate(found):
        if index not in chosen:
            layer.gradient_checkpointing = False
    return len(chosen), total


def selective_checkpointing(spec: Any, model_config: dict[str, Any], world: int, gpu_gib: float) -> Any:
    """A Trainer callback that, once transformers turned checkpointing on, leaves it on only for
    the layers this GPU needs to recompute (``memory.checkpointed_layers``)."""
    from transformers import TrainerCallback

    from hipbot.jobs.finetune.memory import checkpointed_layers

    layers = checkpointed_layers(spec, model_config, world, gpu_gib)

    class SelectiveCheckpointing(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            done, total = limit_checkpointing(model, layers)
            if int(os.environ.get("RANK", "0")) == 0:
                log.info(
                    "gradient checkpointing: %d of %d layers recomputed (what %.0f GiB needs)",
                    done,
                    total,
                    gpu_gib,
                )

    return SelectiveCheckpointing()
