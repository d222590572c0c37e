"""One progress line per optimizer step, without stopping the GPU to read the loss.

Reading a loss on the host (``.item()``) waits for the GPU to finish everything queued before
it; the GPU then idles while Python fetches the next batch and launches its first kernels (about
5 ms a step on the H200 recipe, bench/README.md). So each step's loss is copied to pinned host
memory behind an event and read one step later, when the GPU has long finished that step: the
line of step N is written at the end of step N+1 (the last ones when training ends, or at once on
a step HF logs, which has synced anyway). HF's own log (``log_history``: the mean over each
``logging_steps`` window, and grad_norm) still runs every ``logging_steps`` steps and on the last.

Under several processes every rank sums the step's loss into a mean (a stream-ordered all-reduce,
no host sync) before rank 0 writes it, as HF's logged loss is the mean over ranks.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class StepLosses:
    """The current optimizer step's loss, summed over its micro-batches on the device, and its
    real tokens (the collators' count, a host int)."""

    def __init__(self) -> None:
        self.pending: Any = None
        self.tokens = 0

    def add(self, loss: Any, tokens: int = 0) -> None:
        self.pending = loss if self.pending is None else self.pending + loss
        self.tokens += tokens

    def take(self) -> tuple[Any, int]:
        loss, tokens = self.pending, self.tokens
        self.pending, self.tokens = None, 0
        return loss, tokens


@dataclass
class _Step:
    step: int
    epoch: float
    lr: float | None
    tokens: int
    loss: Any  # a pinned host tensor being filled, or a float
    ready: Any = None  # the CUDA event (timed) after the copy, or None
    ended: float = 0.0  # when the step's work was queued (on a CPU: when it ended)
    grad_norm: float | None = None

    def value(self) -> float | None:
        if self.ready is not None:
            self.ready.synchronize()
        value = None if self.loss is None else float(self.loss)
        # a diverged step has no loss to show (and NaN is not JSON)
        return value if value is not None and math.isfinite(value) else None


def _device_copy(loss: Any, world: int) -> tuple[Any, Any]:
    """The step's loss (mean over ranks), copied to the host behind an event when on a GPU."""
    import torch

    loss = loss.detach().float().reshape(())
    if world > 1 and torch.distributed.is_initialized():
        loss = loss.clone()
        torch.distributed.all_reduce(loss)
        loss = loss / world
    if not loss.is_cuda:
        return float(loss), None
    host = torch.empty((), dtype=torch.float32, pin_memory=True)
    host.copy_(loss, non_blocking=True)
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return host, event


def progress_callback(step_losses: StepLosses, log_path: Path, world: int) -> Any:
    """The callback that writes one JSON line per optimizer step; rank 0 writes the job's progress,
    other ranks their own. Tokens are the step's batches' real tokens, counted by the collator."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        def __init__(self) -> None:
            self.start_step = 0
            self.queue: list[_Step] = []
            self.last_t = time.perf_counter()  # the last step's end on a CPU
            self.last_event: Any = None  # the last written step's CUDA event
            self.elapsed = 0.0  # the written steps' time, for the ETA

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.start_step = state.global_step
            self.last_t, self.last_event, self.elapsed = time.perf_counter(), None, 0.0

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            loss, tokens = step_losses.take()
            host, ready = _device_copy(loss, world) if loss is not None else (None, None)
            scheduler = kw.get("lr_scheduler")
            lr = float(scheduler.get_last_lr()[0]) if scheduler is not None else None
            epoch = round(state.epoch or 0.0, 4)
            self.queue.append(_Step(state.global_step, epoch, lr, tokens, host, ready, time.perf_counter()))
            if state.global_step >= state.max_steps:
                control.should_log = True  # HF's log (and the results' loss curve) ends on the last step
            self._write(state, keep=1)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            if not logs or "loss" not in logs:
                return
            if self.queue and self.queue[-1].step == state.global_step:
                self.queue[-1].grad_norm = logs.get("grad_norm")
            self._write(state, keep=0)  # HF has read the loss: the GPU is idle anyway

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self._write(state, keep=0)

        def _write(self, state: Any, keep: int) -> None:
            """Write every queued step but the last ``keep``."""
            done, self.queue = self.queue[: len(self.queue) - keep], self.queue[len(self.queue) - keep :]
            for item in done:
                loss = item.value()
                seconds = self._seconds(item)
                self.elapsed += seconds
                tokens = item.tokens
                steps = max(1, item.step - self.start_step)
                eta = self.elapsed / steps * max(0, state.max_steps - item.step)
                line = {
                    "step": item.step,
                    "max_steps": state.max_steps,
                    "epoch": item.epoch,
                    "loss": loss,
                    "lr": item.lr,
                    "grad_norm": item.grad_norm,
                    "tokens": tokens * world,
                    "tokens_per_second": round(tokens * world / max(seconds, 1e-9), 1),
                    "eta_seconds": round(eta, 1),
                    "time": time.time(),
                }
                with log_path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(line) + "\n")

        def _seconds(self, item: _Step) -> float:
            """The step's own time: between its event and the step before's on the GPU (the lines
            are written late, some together); on a CPU, between the ends of the two steps."""
            end = item.ended if item.ready is None else time.perf_counter()
            seconds, self.last_t = end - self.last_t, end
            if item.ready is not None and self.last_event is not None:
                try:
                    seconds = self.last_event.elapsed_time(item.ready) / 1000
                except RuntimeError as exc:  # a progress figure must not stop the job
                    log.warning("step time from the wall clock: %s", exc)
            self.last_event = item.ready
            return seconds

    return Progress()
