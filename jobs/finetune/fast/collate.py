"""Batches for the trainer: right-padded (the plain path) or padding-free (the fast path).

A padding-free batch puts its examples end to end in one row: ``position_ids`` restart at 0 for
each example, ``cu_seq_lens_q``/``cu_seq_lens_k`` (transformers' FlashAttention keyword names)
mark where each starts, and the first label of each example is ignored so that no example learns
to predict the next one's first token. The loss is the same token mean as the padded batch's;
no FLOP and no activation goes to padding.

With ``label_index`` (the fused loss), a batch also carries ``label_index``: the flat positions
(row x width + column) whose next token carries a label, found here on the CPU so that the loss
never has to ask the GPU how many there are. With ``with_token_count`` it carries its count of
real tokens (``TOKEN_COUNT``) for the step's progress line.

``neat_pack`` is LLaMA-Factory's ``neat_packing``: examples joined into rows of at most
``cutoff_len`` tokens, each keeping its own sequence length, so attention stays inside each example.
"""

from __future__ import annotations

from typing import Any

IGNORE_INDEX = -100
LABEL_INDEX = "label_index"
# the batch's real tokens, a plain int that hipbot's Trainer takes out before the model sees the
# batch: each step's tokens/s counts that step's own batches (the data loader fetches ahead)
TOKEN_COUNT = "hipbot_tokens"
Example = dict[str, list[int]]


def label_index(labels: Any) -> Any:
    """Flat positions ``b * width + p`` of a ``(batch, width)`` label tensor whose label at
    ``p + 1`` is not ignored: the positions that predict a labelled token."""
    import torch

    width = labels.shape[-1]
    rows, cols = torch.nonzero(labels[:, 1:] != IGNORE_INDEX, as_tuple=True)
    return rows * width + cols


class PaddedCollator:
    """Right-pads ``input_ids`` with the pad id and ``labels`` with -100."""

    def __init__(
        self, pad_id: int, *, with_label_index: bool = False, with_token_count: bool = False
    ) -> None:
        self.pad_id = pad_id
        self.with_label_index = with_label_index
        self.with_token_count = with_token_count
        self.tokens = 0  # counted here, on the CPU, so that tokens/s costs no device sync

    def __call__(self, batch: list[Example]) -> dict[str, Any]:
        import torch

        width = max(len(x["input_ids"]) for x in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, x in enumerate(batch):
            n = len(x["input_ids"])
            ids[i, :n] = torch.tensor(x["input_ids"])
            labels[i, :n] = torch.tensor(x["labels"])
            mask[i, :n] = 1
        real = int(mask.sum())
        self.tokens += real
        batch_out: dict[str, Any] = {"input_ids": ids, "labels": labels, "attention_mask": mask}
        if self.with_label_index:
            batch_out[LABEL_INDEX] = label_index(labels)
        if self.with_token_count:
            batch_out[TOKEN_COUNT] = real
        return batch_out


class FlatCollator:
    """Padding-free: the batch's sequences in one row, with their positions and boundaries (or,
    when they all have the same length, as they are)."""

    def __init__(self, *, with_label_index: bool = False, with_token_count: bool = False) -> None:
        self.with_label_index = with_label_index
        self.with_token_count = with_token_count
        self.tokens = 0

    def __call__(self, batch: list[Example]) -> dict[str, Any]:
        out = self._collate(batch)
        self.tokens += out["input_ids"].numel()  # no padding in these rows
        if self.with_label_index:
            out[LABEL_INDEX] = label_index(out["labels"])
        if self.with_token_count:
            out[TOKEN_COUNT] = out["input_ids"].numel()
        return out

    def _collate(self, batch: list[Example]) -> dict[str, Any]:
        import torch

        if all("seq_lens" not in x for x in batch) and len({len(x["input_ids"]) for x in batch}) == 1:
            # nothing to pad (every example cut at cutoff_len): rows without a mask take SDPA's
            # causal kernel (cuDNN's on Hopper), faster than varlen FlashAttention 2
            return {
                "input_ids": torch.tensor([x["input_ids"] for x in batch], dtype=torch.long),
                "labels": torch.tensor([x["labels"] for x in batch], dtype=torch.long),
            }
        ids: list[int] = []
        labels: list[int] = []
        positions: list[int] = []
        lengths: list[int] = []
        for x in batch:
            start = 0
            for n in x.get("seq_lens") or [len(x["input_ids"])]:
                ids += x["input_ids"][start : start + n]
                labels += [IGNORE_INDEX, *x["labels"][start + 1 : start + n]]
                positions += range(n)
                lengths.append(n)
                start += n
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int32), 0)
        longest = max(lengths)
        return {
            "input_ids": torch.tensor([ids], dtype=torch.long),
            "labels": torch.tensor([labels], dtype=torch.long),
            "position_ids": torch.tensor([positions], dtype=torch.long),
            "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu,
            "max_length_q": longest,
            "max_length_k": longest,
        }


def neat_pack(examples: list[Example], cutoff_len: int) -> list[Example]:
    """First-fit, longest first (as ``datasets.pack``), each row remembering its examples' lengths."""
    bins: list[Example] = []
    for example in sorted(examples, key=lambda x: len(x["input_ids"]), reverse=True):
        n = len(example["input_ids"])
        target = next((b for b in bins if len(b["input_ids"]) + n <= cutoff_len), None)
        if target is None:
            bins.append(
                {"input_ids": list(example["input_ids"]), "labels": list(example["labels"]), "seq_lens": [n]}
            )
        else:
            target["input_ids"] += example["input_ids"]
            target["labels"] += example["labels"]
            target["seq_lens"].append(n)
    return bins
