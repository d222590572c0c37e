"""Batches for the trainer: right-padded (the plain path) or padding-free (the fast path).

A padding-free batch puts its examples end to end in one row: ``position_ids`` restart at 0 for
each example, ``cu_seq_lens_q``/``cu_seq_lens_k`` (transformers' FlashAttention keyword names)
mark where each starts, and the first label of each example is ignored so that no example learns
to predict the next one's first token. The loss is the same token mean as the padded batch's;
no FLOP and no activation goes to padding.

``neat_pack`` is LLaMA-Factory's ``neat_packing``: examples joined into rows of at most
``cutoff_len`` tokens, each keeping its own sequence length, so attention stays inside each example.
"""

from __future__ import annotations

from typing import Any

IGNORE_INDEX = -100
Example = dict[str, list[int]]


class PaddedCollator:
    """Right-pads ``input_ids`` with the pad id and ``labels`` with -100."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id
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
        self.tokens += int(mask.sum())
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}


class FlatCollator:
    """Padding-free: the batch's sequences in one row, with their positions and boundaries (or,
    when they all have the same length, as they are)."""

    def __init__(self) -> None:
        self.tokens = 0

    def __call__(self, batch: list[Example]) -> dict[str, Any]:
        import torch

        if all("seq_lens" not in x for x in batch) and len({len(x["input_ids"]) for x in batch}) == 1:
            # nothing to pad (every example cut at cutoff_len): rows without a mask take SDPA's
            # causal kernel (cuDNN's on Hopper), faster than varlen FlashAttention 2
            self.tokens += sum(len(x["input_ids"]) for x in batch)
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
        self.tokens += len(ids)
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
