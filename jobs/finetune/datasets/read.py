"""Reading datasets as LLaMA-Factory does: ``dataset_info.json`` entries, local files and folders
(json, jsonl, csv, parquet, arrow), ``split`` slices and ``num_samples``; what cannot reach a worker
(Hub-only, script, preference, KTO and multimodal datasets) is refused with the reason."""

from __future__ import annotations

import csv
import io
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hipbot.errors import HipbotError
from hipbot.i18n import N_

if TYPE_CHECKING:
    from hipbot.jobs.finetune.spec import JobSpec

# One record of a dataset file, as JSON/CSV/Arrow gives it.
Record = dict[str, Any]

FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
# Files under dataset_dir may also be Arrow (what 🤗 datasets writes), as LLaMA-Factory reads them.
LOCAL_FORMATS = {**FILE_FORMATS, ".arrow": "arrow"}
MEDIA_COLUMNS = ("images", "videos", "audios")
ATTACHMENT_LIMIT = 64 * 1024 * 1024

# Where a dataset_info.json entry can point besides a local file; workers reach none of them.
REMOTE_SOURCES = {
    "hf_hub_url": "the Hugging Face Hub",
    "ms_hub_url": "the ModelScope Hub",
    "om_hub_url": "the Modelers Hub",
    "cloud_file_name": "cloud storage",
}
SPLIT_RE = re.compile(r"^\s*(\w+)\s*(?:\[\s*(-?\d+%?)?\s*:\s*(-?\d+%?)?\s*\])?\s*$")


@dataclass(frozen=True)
class DatasetAttr:
    """One ``dataset_info.json`` entry (LLaMA-Factory's data/README.md)."""

    name: str
    file_name: str | None = None
    remote: tuple[str, str] | None = None  # (key, url) of a Hub/cloud source
    script_url: str | None = None
    subset: str | None = None
    split: str = "train"
    num_samples: int | None = None
    formatting: str = "alpaca"
    columns: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


def read_dataset_info(dataset_dir: Path | str) -> dict[str, Any]:
    path = Path(dataset_dir) / "dataset_info.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise HipbotError(
            N_("no dataset_info.json in {dataset_dir}", dataset_dir=dataset_dir),
            hint=N_("declare each dataset as LLaMA-Factory does"),
        ) from exc
    except (OSError, ValueError) as exc:
        raise HipbotError(N_("cannot read {path}: {exc}", path=path, exc=exc)) from exc
    if not isinstance(info, dict):
        raise HipbotError(N_("{path} must map dataset names to entries", path=path))
    return info


def dataset_attr(name: str, info: dict[str, Any]) -> DatasetAttr:
    """The entry for ``name``, refusing what SFT on a worker cannot use (each with the reason)."""
    if name not in info:
        import difflib

        close = difflib.get_close_matches(name, list(info), n=1)
        if close:
            message = N_(
                "dataset {name!r} is not declared in dataset_info.json; did you mean {close!r}?",
                name=name,
                close=close[0],
            )
        else:
            message = N_(
                "dataset {name!r} is not declared in dataset_info.json (declared: {declared})",
                name=name,
                declared=", ".join(sorted(info)) or N_("none"),
            )
        raise HipbotError(message)
    entry = info[name]
    if not isinstance(entry, dict):
        raise HipbotError(N_("dataset {name!r}: its dataset_info.json entry must be an object", name=name))
    formatting = entry.get("formatting", "alpaca")
    if formatting not in ("alpaca", "sharegpt"):
        raise HipbotError(
            N_(
                "dataset {name!r}: formatting must be alpaca or sharegpt, got {formatting!r}",
                name=name,
                formatting=formatting,
            )
        )
    columns = entry.get("columns") or {}
    tags = entry.get("tags") or {}
    if not isinstance(columns, dict) or not isinstance(tags, dict):
        raise HipbotError(
            N_("dataset {name!r}: columns and tags must be objects mapping names to names", name=name)
        )
    if entry.get("ranking"):
        raise HipbotError(
            N_(
                "dataset {name!r} is a preference dataset (ranking: true, chosen/rejected "
                "answers) for reward modelling or DPO; SFT trains on one answer per prompt: use "
                "a dataset without ranking",
                name=name,
            )
        )
    if columns.get("kto_tag"):
        raise HipbotError(
            N_(
                "dataset {name!r} has a kto_tag column (KTO feedback data); SFT trains on every "
                "answer as a good one: drop kto_tag from its columns, or pick an SFT dataset",
                name=name,
            )
        )
    media = [c for c in MEDIA_COLUMNS if columns.get(c)]
    if media:
        raise HipbotError(
            N_(
                "dataset {name!r} has {media} columns: workers train text-only LoRA adapters, "
                "multimodal datasets are not supported",
                name=name,
                media="/".join(media),
            )
        )
    remote = next(((k, str(entry[k])) for k in REMOTE_SOURCES if entry.get(k)), None)
    if not entry.get("file_name") and remote is None and not entry.get("script_url"):
        raise HipbotError(
            N_("dataset {name!r}: give file_name (a file or folder under dataset_dir)", name=name)
        )
    if not entry.get("file_name"):
        _no_local_copy(name, remote, entry.get("script_url"))
    num_samples = entry.get("num_samples")
    if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
        raise HipbotError(
            N_(
                "dataset {name!r}: num_samples must be a positive whole number, got {num_samples!r}",
                name=name,
                num_samples=num_samples,
            )
        )
    split = str(entry.get("split") or "train")
    if not SPLIT_RE.match(split):
        raise HipbotError(
            N_(
                "dataset {name!r}: split {split!r} is not a split name such as train or train[:1000]",
                name=name,
                split=split,
            )
        )
    return DatasetAttr(
        name=name,
        file_name=entry.get("file_name"),
        remote=remote,
        script_url=entry.get("script_url"),
        subset=entry.get("subset"),
        split=split,
        num_samples=num_samples,
        formatting=formatting,
        columns={k: str(v) for k, v in columns.items() if v},
        tags={k: str(v) for k, v in tags.items() if v},
    )


def _no_local_copy(name: str, remote: tuple[str, str] | None, script_url: str | None) -> None:
    """A dataset only on a hub (or behind a loading script) cannot reach a worker: say what to do."""
    if remote is not None:
        key, url = remote
        raise HipbotError(
            N_(
                "dataset {name!r} is on {source} ({key}: {url}) and workers cannot download "
                "datasets; download it, put its files under dataset_dir and declare file_name, "
                "or attach the file to the job",
                name=name,
                source=REMOTE_SOURCES[key],
                key=key,
                url=url,
            )
        )
    raise HipbotError(
        N_(
            "dataset {name!r} is loaded by a script (script_url: {script_url}); workers do "
            "not run dataset scripts: export it to a json/jsonl/csv/parquet file and declare "
            "file_name",
            name=name,
            script_url=script_url,
        )
    )


def dataset_problems(spec: JobSpec, dataset_dir: Path | str | None = None) -> list[str]:
    """Every problem with the datasets a job names (``dataset`` and ``eval_dataset``): entries that are
    missing or cannot be used, and local files that do not exist; all at once, like the spec's."""
    dataset_dir = Path(dataset_dir or spec.dataset_dir)
    try:
        info = read_dataset_info(dataset_dir)
    except HipbotError as exc:
        return [str(exc)]
    problems = []
    for name in dict.fromkeys([*spec.dataset, *spec.eval_dataset]):
        try:
            attr = dataset_attr(name, info)
            path = dataset_dir / (attr.file_name or "")
            if not path.exists():
                if attr.remote is not None or attr.script_url:
                    _no_local_copy(attr.name, attr.remote, attr.script_url)
                raise HipbotError(N_("dataset {name!r}: file {path} does not exist", name=name, path=path))
        except HipbotError as exc:
            problems.append(str(exc))
    return problems


def _read_file(path: Path) -> list[Record]:
    kind = LOCAL_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise HipbotError(
            N_(
                "{path_name}: unsupported dataset file type (use json, jsonl, csv, parquet or arrow)",
                path_name=path.name,
            )
        )
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if kind == "arrow":
            import pyarrow as pa

            with pa.memory_map(str(path)) as source:
                try:
                    return pa.ipc.open_stream(source).read_all().to_pylist()
                except pa.ArrowInvalid:  # the file (random access) format rather than a stream
                    return pa.ipc.open_file(source).read_all().to_pylist()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HipbotError(N_("cannot read dataset file {path}: {exc}", path=path, exc=exc)) from exc
    return parse_records(text, path.name)


def parse_records(text: str, name: str) -> list[Record]:
    """Rows of a json (list), jsonl or csv text."""
    suffix = Path(name).suffix.lower()
    try:
        if suffix == ".csv":
            return list(csv.DictReader(io.StringIO(text)))
        stripped = text.lstrip()
        if stripped.startswith("["):
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (ValueError, csv.Error) as exc:
        raise HipbotError(
            N_("{name}: not valid {format}: {exc}", name=name, format=suffix.lstrip(".") or "json", exc=exc)
        ) from exc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise HipbotError(N_("{name}: expected a list of records (objects)", name=name))
    return rows


def _bound(text: str | None, n: int) -> int | None:
    if not text:
        return None
    if text.endswith("%"):
        return round(n * int(text[:-1]) / 100)
    return int(text)


def select_split(rows: list[Record], attr: DatasetAttr) -> list[Record]:
    """``split`` as 🤗 datasets reads it for a local file: its one split, ``train``, or a slice of it
    (``train[:1000]``, ``train[10%:]``)."""
    match = SPLIT_RE.match(attr.split)
    assert match is not None  # checked by dataset_attr
    split, start, stop = match.groups()
    if split != "train":
        raise HipbotError(
            N_(
                "dataset {attr_name!r}: split {split!r} does not exist: a local file has one "
                "split, train (take part of it with a slice such as train[:1000] or train[90%:])",
                attr_name=attr.name,
                split=split,
            )
        )
    return rows[_bound(start, len(rows)) : _bound(stop, len(rows))]


def sample_rows(rows: list[Record], num_samples: int, seed: int) -> list[Record]:
    """LLaMA-Factory's ``num_samples``: a random subset, or every row plus random repeats when larger."""
    rng = random.Random(seed)
    picked = rng.sample(range(len(rows)), min(num_samples, len(rows)))
    picked += [rng.randrange(len(rows)) for _ in range(num_samples - len(picked))] if rows else []
    return [rows[i] for i in picked]


def load_records(attr: DatasetAttr, dataset_dir: Path | str, seed: int = 42) -> list[Record]:
    """Rows of one dataset from its file (or folder of files) under ``dataset_dir``, after ``split``
    and ``num_samples``; Hub-only datasets cannot reach a worker and say so."""
    path = Path(dataset_dir) / (attr.file_name or "")
    if not attr.file_name or not path.exists():
        if attr.remote is not None or attr.script_url:
            _no_local_copy(attr.name, attr.remote, attr.script_url)
        raise HipbotError(
            N_("dataset {attr_name!r}: file {path} does not exist", attr_name=attr.name, path=path)
        )
    if path.is_dir():
        files = sorted(c for c in path.rglob("*") if c.is_file() and c.suffix.lower() in LOCAL_FORMATS)
        if any(
            f.suffix.lower() == ".arrow" for f in files
        ):  # a saved 🤗 dataset: its json files are metadata
            files = [f for f in files if f.suffix.lower() == ".arrow"]
        if not files:
            raise HipbotError(
                N_(
                    "dataset {attr_name!r}: folder {path} holds no json, jsonl, csv, parquet or arrow file",
                    attr_name=attr.name,
                    path=path,
                )
            )
        rows: list[Record] = []
        for child in files:
            rows.extend(_read_file(child))
    else:
        rows = _read_file(path)
    rows = select_split(rows, attr)
    if attr.num_samples is not None and rows:
        rows = sample_rows(rows, attr.num_samples, seed)
    return rows
