"""Tokenising: each conversation rendered by its chat template, prompts masked (-100) and only the
assistant turns as targets; datasets mixed (``mix_strategy``), split (``val_size``) and packed."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune.datasets.convert import to_messages
from hipbot.jobs.finetune.datasets.read import DatasetAttr, dataset_attr, load_records, read_dataset_info
from hipbot.jobs.finetune.datasets.templates import TEMPLATES

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from hipbot.jobs.finetune.spec import JobSpec

IGNORE_INDEX = -100
# One tokenised example: input_ids and labels (-100 where the loss is masked).
Example = dict[str, list[int]]


def chat_template(tokenizer: PreTrainedTokenizerBase, template: str | None) -> str:
    """The Jinja template to render with: one of ours by name; for LLaMA-Factory's other names
    (which reproduce a model family's own format) or none, the tokenizer's own; else 'default'."""
    if template in TEMPLATES:
        return TEMPLATES[template]
    return getattr(tokenizer, "chat_template", None) or TEMPLATES["default"]


def _render(
    tokenizer: PreTrainedTokenizerBase,
    template: str,
    messages: list[dict[str, str]],
    gen: bool,
    options: dict[str, Any],
) -> str:
    return tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=gen, **options
    )


def encode(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, str]],
    template: str,
    cutoff_len: int,
    *,
    train_on_prompt: bool = False,
    mask_history: bool = False,
    template_options: dict[str, Any] | None = None,
) -> Example | None:
    """input_ids and labels for one conversation: each assistant turn is a target, the rest -100.

    Segments are the differences between renders of growing prefixes, so any template whose
    render of a prefix is a prefix of the whole works (all named ones, and HF chat templates).
    ``template_options`` go to the template (``enable_thinking`` for reasoning models' templates).
    """
    options = template_options or {}
    boundaries: list[tuple[str, bool]] = []
    done = ""
    last_assistant = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = _render(tokenizer, template, messages[:i], True, options)
        full = _render(tokenizer, template, messages[: i + 1], False, options)
        if not prompt.startswith(done):
            prompt = done + prompt[len(_common_prefix(done, prompt)) :]
        if not full.startswith(prompt):
            full = prompt + full[len(_common_prefix(prompt, full)) :]
        target = train_on_prompt or not mask_history or i == last_assistant
        boundaries.append((prompt[len(done) :], train_on_prompt))
        boundaries.append((full[len(prompt) :], target))
        done = full
    input_ids: list[int] = []
    labels: list[int] = []
    for text, is_target in boundaries:
        if not text:
            continue
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        input_ids += ids
        labels += ids if is_target else [IGNORE_INDEX] * len(ids)
    input_ids, labels = input_ids[:cutoff_len], labels[:cutoff_len]
    if all(label == IGNORE_INDEX for label in labels):
        return None
    return {"input_ids": input_ids, "labels": labels}


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


@dataclass
class Examples:
    train: list[Example]
    eval: list[Example]
    skipped: int


def _encode_dataset(
    spec: JobSpec, tokenizer: PreTrainedTokenizerBase, template: str, attr: DatasetAttr, dataset_dir: Path
) -> tuple[list[Example], int]:
    rows = load_records(attr, dataset_dir, seed=spec.seed)
    if spec.max_samples:
        rows = rows[: spec.max_samples]
    thinking = False if (spec.template or "").endswith("_nothink") else spec.enable_thinking
    options = {} if thinking is None else {"enable_thinking": thinking}
    examples, skipped = [], 0
    for row in rows:
        messages = to_messages(row, attr)
        if messages and spec.default_system and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": spec.default_system}, *messages]
        encoded = (
            encode(
                tokenizer,
                messages,
                template,
                spec.cutoff_len,
                train_on_prompt=spec.train_on_prompt,
                mask_history=spec.mask_history,
                template_options=options,
            )
            if messages
            else None
        )
        if encoded is None:
            skipped += 1
        else:
            examples.append(encoded)
    return examples, skipped


def interleave(
    parts: list[list[Example]], strategy: str, probs: list[float] | None, seed: int
) -> list[Example]:
    """LLaMA-Factory's ``mix_strategy`` (🤗 ``interleave_datasets``): take examples from the datasets in
    turn (or at random by ``interleave_probs``) until the first runs out (``interleave_under``) or
    until every one has run out once, restarting the shorter ones (``interleave_over``)."""
    if strategy == "concat":
        return [x for part in parts for x in part]
    rng = random.Random(seed)
    live = [i for i, part in enumerate(parts) if part and (probs is None or probs[i] > 0)]
    positions = dict.fromkeys(live, 0)
    exhausted: set[int] = set()
    out: list[Example] = []
    turn = 0
    while live:
        if probs is None:
            i = live[turn % len(live)]
            turn += 1
        else:
            i = rng.choices(live, weights=[probs[j] for j in live])[0]
        out.append(parts[i][positions[i]])
        positions[i] += 1
        if positions[i] == len(parts[i]):
            exhausted.add(i)
            positions[i] = 0
            if strategy == "interleave_under" or exhausted.issuperset(live):
                break
    return out


def pack(examples: list[Example], cutoff_len: int) -> list[Example]:
    """LLaMA-Factory's ``packing``: examples joined into sequences of at most ``cutoff_len`` tokens
    (first-fit, longest first), so a step carries fewer pad tokens."""
    bins: list[Example] = []
    for example in sorted(examples, key=lambda x: len(x["input_ids"]), reverse=True):
        n = len(example["input_ids"])
        target = next((b for b in bins if len(b["input_ids"]) + n <= cutoff_len), None)
        if target is None:
            bins.append({"input_ids": list(example["input_ids"]), "labels": list(example["labels"])})
        else:
            target["input_ids"] += example["input_ids"]
            target["labels"] += example["labels"]
    return bins


def build_examples(
    spec: JobSpec, tokenizer: PreTrainedTokenizerBase, dataset_dir: Path | str | None = None
) -> Examples:
    """Read every dataset named in the spec, tokenize, mask prompts, mix them (``mix_strategy``);
    the eval set is ``eval_dataset`` or a ``val_size`` split; ``packing`` joins training examples."""
    dataset_dir = Path(dataset_dir or spec.dataset_dir)
    names = [*spec.dataset, *spec.eval_dataset]
    if not (dataset_dir / "dataset_info.json").is_file():
        raise HipbotError(
            N_(
                "dataset {name!r}: no dataset_info.json in {dataset_dir}",
                name=names[0],
                dataset_dir=dataset_dir,
            )
        )
    info = read_dataset_info(dataset_dir)
    template = chat_template(tokenizer, spec.template)
    skipped = 0

    def encoded(name: str) -> list[Example]:
        nonlocal skipped
        examples, dropped = _encode_dataset(spec, tokenizer, template, dataset_attr(name, info), dataset_dir)
        skipped += dropped
        return examples

    train = interleave(
        [encoded(n) for n in spec.dataset], spec.mix_strategy, spec.interleave_probs, spec.seed
    )
    evaluation = [x for n in spec.eval_dataset for x in encoded(n)]
    if not train:
        raise HipbotError(
            N_(
                "datasets {datasets} gave no training example ({skipped} records skipped: empty "
                "answers, unknown roles, or prompts longer than cutoff_len)",
                datasets=", ".join(spec.dataset),
                skipped=skipped,
            )
        )
    if spec.eval_dataset and not evaluation:
        raise HipbotError(
            N_("eval_dataset {datasets} gave no example", datasets=", ".join(spec.eval_dataset))
        )
    if spec.val_size:
        n_eval = int(spec.val_size) if spec.val_size >= 1 else int(len(train) * spec.val_size)
        n_eval = min(n_eval, len(train) - 1)
        if n_eval:
            random.Random(spec.seed).shuffle(train)
            train, evaluation = train[n_eval:], train[:n_eval]
    if spec.packing:
        train = pack(train, spec.cutoff_len)
    return Examples(train=train, eval=evaluation, skipped=skipped)
