"""Register adapters, and publish them to vLLM servers through the runtime LoRA API.

Adapter files come from volunteers' workers, so they are inspected without being executed: only
``adapter_model.safetensors`` is accepted (its JSON header is read directly; nothing is ever
unpickled), and everything vLLM would refuse (rank above ``--max-lora-rank``, another base model,
weights outside the LoRA layers) is refused here first with a message that says what to change.
Only the two files vLLM needs are copied (with the job's ``template_record.json``, the chat template
it trained with), into ``<adapters>/<name>/`` and then, unless that directory is already shared with
the server, into ``<server adapter dir>/<name>/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipbot.config import Settings
from hipbot.db import utcnow
from hipbot.errors import HipbotError
from hipbot.i18n import N_, Joined, _
from hipbot.jobs.finetune import template_record
from hipbot.jobs.finetune.template_record import PROBE_QUESTION
from hipbot.jobs.serve.registry import Adapter, Registry, Server, validate_name
from hipbot.jobs.serve.vllm_client import ServerDown, VllmClient, VllmRejected

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_FILES = (CONFIG_FILE, WEIGHTS_FILE)
PICKLED_WEIGHTS = (
    "adapter_model.bin",
    "adapter_model.pt",
    "adapter_model.pth",
    "adapter_model.pkl",
    "adapter_model.ckpt",
)
# vLLM serves LoRA on linear layers only; these would need full-weight replacement.
NON_LORA_MODULES = ("lm_head", "embed_tokens", "wte", "word_embeddings", "embed_in", "embed_out")
MAX_HEADER = 64 * 1024 * 1024
SAFETENSORS_DTYPES = {"BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64",
                      "F8_E4M3", "F8_E5M2"}  # fmt: skip


class AdapterRejected(HipbotError):
    """The adapter cannot be served (as it is, or on that server); ``problems`` lists every reason."""

    def __init__(self, subject: str, problems: list[str], hint: str | None = None) -> None:
        super().__init__(
            N_("{subject}: {problems}", subject=subject, problems=Joined("; ", problems)), hint=hint
        )
        self.problems = problems


@dataclass(frozen=True)
class AdapterInfo:
    """What the files say about an adapter, read without executing anything."""

    rank: int
    alpha: float | None
    target_modules: tuple[str, ...]
    base_model: str | None
    size_bytes: int
    sha256: str
    tensors: int


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_safetensors_header(path: Path) -> dict[str, dict[str, Any]]:
    """The tensor table of a safetensors file (8-byte length, JSON header), validated against the
    file size; raises ``ValueError`` for anything that is not a well-formed safetensors file."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if head[:1] == b"\x80" or head[:4] == b"PK\x03\x04":
            raise ValueError("it is a pickle / torch archive renamed to .safetensors")
        if len(head) < 8:
            raise ValueError("file too short")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER, size - 8):
            raise ValueError("header length is out of range")
        try:
            header = json.loads(fh.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    header.pop("__metadata__", None)
    data_size = size - 8 - length
    for name, entry in header.items():
        if not isinstance(entry, dict) or entry.get("dtype") not in SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name!r} has no valid dtype")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise ValueError(f"tensor {name!r} has an invalid shape")
        if not (
            isinstance(offsets, list) and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1] <= data_size
        ):
            raise ValueError(f"tensor {name!r} points outside the file")
    return header


def _module_of(tensor: str) -> str:
    """``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`` -> ``q_proj``."""
    parts = tensor.split(".")
    if len(parts) >= 3 and parts[-2] in ("lora_A", "lora_B") and parts[-1] == "weight":
        return parts[-3]
    return ""


def inspect_adapter(path: Path) -> AdapterInfo:
    """Check a PEFT LoRA adapter folder the way vLLM will, without loading any code or pickle."""
    subject = N_("adapter at {path}", path=path)
    if not path.is_dir():
        raise AdapterRejected(subject, [N_("not a directory")])
    weights = path / WEIGHTS_FILE
    pickled = [name for name in PICKLED_WEIGHTS if (path / name).exists()]
    if not weights.is_file():
        if pickled:
            raise AdapterRejected(
                subject,
                [
                    N_(
                        "{pickled} is a pickle: only safetensors weights are accepted (loading a pickle "
                        "runs code)",
                        pickled=pickled[0],
                    )
                ],
                hint=N_("save with safe_serialization=True (peft's default): adapter_model.safetensors"),
            )
        raise AdapterRejected(
            subject,
            [N_("no {WEIGHTS_FILE}", WEIGHTS_FILE=WEIGHTS_FILE)],
            hint=N_("point at the folder peft's save_pretrained wrote"),
        )
    if pickled:
        raise AdapterRejected(
            subject,
            [
                N_(
                    "{pickled} (a pickle) sits beside {WEIGHTS_FILE}: refusing an ambiguous adapter",
                    pickled=pickled[0],
                    WEIGHTS_FILE=WEIGHTS_FILE,
                )
            ],
            hint=N_("delete {pickled}", pickled=pickled[0]),
        )
    config_path = path / CONFIG_FILE
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterRejected(subject, [N_("no {CONFIG_FILE}", CONFIG_FILE=CONFIG_FILE)]) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterRejected(
            subject, [N_("{CONFIG_FILE} is not valid JSON ({exc})", CONFIG_FILE=CONFIG_FILE, exc=exc)]
        ) from exc
    if not isinstance(config, dict):
        raise AdapterRejected(subject, [N_("{CONFIG_FILE} is not a JSON object", CONFIG_FILE=CONFIG_FILE)])
    try:
        header = read_safetensors_header(weights)
    except (OSError, ValueError) as exc:
        raise AdapterRejected(
            subject,
            [N_("{WEIGHTS_FILE} is not a valid safetensors file: {exc}", WEIGHTS_FILE=WEIGHTS_FILE, exc=exc)],
        ) from exc

    problems: list[str] = []
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        problems.append(N_("peft_type is {peft_type}: vLLM serves LoRA adapters only", peft_type=peft_type))
    rank = config.get("r")
    if not isinstance(rank, int) or rank <= 0:
        problems.append(
            N_(
                "'r' in {CONFIG_FILE} must be a positive integer, got {rank!r}",
                CONFIG_FILE=CONFIG_FILE,
                rank=rank,
            )
        )
        rank = 0
    patterns = config.get("rank_pattern") or {}
    ranks = [rank, *(v for v in patterns.values() if isinstance(v, int))]
    targets = config.get("target_modules") or []
    target_list = [targets] if isinstance(targets, str) else [str(t) for t in targets]
    if not target_list:
        problems.append(N_("{CONFIG_FILE} lists no target_modules", CONFIG_FILE=CONFIG_FILE))
    if config.get("modules_to_save"):
        problems.append(
            N_(
                "modules_to_save={modules_to_save} trains full layers, which vLLM cannot serve as LoRA",
                modules_to_save=config["modules_to_save"],
            )
        )
    bad_targets = [t for t in target_list if t.split(".")[-1] in NON_LORA_MODULES]
    if bad_targets:
        problems.append(
            N_(
                "target_modules {bad_targets} are embedding/output layers, which vLLM cannot serve as LoRA",
                bad_targets=bad_targets,
            )
        )
    if config.get("use_dora"):
        problems.append(N_("DoRA adapters (use_dora) are not supported by vLLM"))
    if config.get("bias", "none") != "none" or config.get("lora_bias"):
        problems.append(N_("adapters with trained biases are not supported by vLLM"))
    outside = sorted(
        name
        for name in header
        if not _module_of(name) or any(part in NON_LORA_MODULES for part in name.split("."))
    )
    if outside:
        shown = ", ".join(outside[:3])
        if len(outside) > 3:
            shown = N_("{names} and {count} more", names=shown, count=len(outside) - 3)
        problems.append(N_("weights outside the LoRA layers: {shown}", shown=shown))
    if not header:
        problems.append(N_("{WEIGHTS_FILE} holds no tensors", WEIGHTS_FILE=WEIGHTS_FILE))
    for name, entry in header.items():
        if name.endswith("lora_A.weight") and len(entry["shape"]) == 2:
            ranks.append(entry["shape"][0])
    if problems:
        raise AdapterRejected(subject, problems)
    alpha = config.get("lora_alpha")
    modules = sorted({m for m in (_module_of(n) for n in header) if m} or set(target_list))
    base = config.get("base_model_name_or_path")
    return AdapterInfo(
        rank=max(ranks),
        alpha=float(alpha) if isinstance(alpha, int | float) else None,
        target_modules=tuple(modules),
        base_model=str(base) if base else None,
        size_bytes=sum((path / f).stat().st_size for f in ADAPTER_FILES),
        sha256=sha256_file(weights),
        tensors=len(header),
    )


def model_key(name: str) -> str:
    """``HuggingFaceTB/SmolLM2-135M-Instruct`` and ``/models/SmolLM2-135M-Instruct/`` name the same model."""
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def server_problems(adapter: Adapter, server: Server) -> list[str]:
    """What the server would refuse about this adapter."""
    problems = []
    if adapter.rank > server.max_lora_rank:
        problems.append(
            N_(
                "rank {adapter_rank} is above the server's --max-lora-rank {server_max_lora_rank}",
                adapter_rank=adapter.rank,
                server_max_lora_rank=server.max_lora_rank,
            )
        )
    if model_key(adapter.base_model) not in {model_key(server.base_model), model_key(server.served_model)}:
        problems.append(
            N_(
                "it was trained on {adapter_base_model}, the server serves {server_base_model}",
                adapter_base_model=adapter.base_model,
                server_base_model=server.base_model,
            )
        )
    if adapter.name == server.served_model:
        problems.append(
            N_("the name {adapter_name!r} is the server's base model name", adapter_name=adapter.name)
        )
    return problems


def _copy_adapter(source: Path, dest: Path) -> None:
    """Copy the adapter's two files (and its template record) into ``dest`` atomically (temporary
    sibling, then rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    record = () if not (source / template_record.RECORD_FILE).is_file() else (template_record.RECORD_FILE,)
    try:
        for name in (*ADAPTER_FILES, *record):
            shutil.copyfile(source / name, tmp / name)
        tmp.chmod(0o755)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def child_dir(root: Path, name: str) -> Path:
    """``root/name`` for a validated name, refusing anything that would land outside ``root``."""
    validate_name(name)
    root = root.resolve()
    target = (root / name).resolve()
    if target.parent != root:
        raise HipbotError(
            N_("refusing adapter path {target}: it is outside {root}", target=target, root=root)
        )
    return target


def register_adapter(
    registry: Registry,
    settings: Settings,
    name: str,
    source: Path,
    *,
    base_model: str | None = None,
    job_id: str | None = None,
    owner: str | None = None,
) -> Adapter:
    """Inspect ``source`` and keep a copy of its adapter files under ``settings.adapters/<name>``.

    Registering the same files under the same name again returns the existing entry; other files
    under a taken name are refused (names are what users chat with, so they never change meaning).
    """
    validate_name(name)
    info = inspect_adapter(Path(source))
    template = template_record.read(Path(source))  # checked: renders its training probe exactly
    existing = registry.find(name)
    if existing is not None:
        if existing.sha256 == info.sha256:
            return existing
        raise HipbotError(
            N_(
                "adapter name {name!r} is already taken by other weights (job {existing_job_id})",
                name=name,
                existing_job_id=existing.job_id,
            ),
            hint=N_(
                "pick another name, or unregister the old one: hipbot serve unregister {name}", name=name
            ),
        )
    base = base_model or info.base_model
    if not base:
        raise AdapterRejected(
            N_("adapter at {source}", source=source),
            [N_("it does not say its base model")],
            hint=N_("pass --base-model"),
        )
    store = child_dir(settings.adapters, name)
    _copy_adapter(Path(source), store)
    return registry.add(
        Adapter(
            name=name,
            base_model=base,
            job_id=None if job_id is None else str(job_id),
            rank=info.rank,
            alpha=info.alpha,
            target_modules=info.target_modules,
            size_bytes=info.size_bytes,
            sha256=info.sha256,
            path=store,
            owner=owner,
            created_at=utcnow(),
            published_at=None,
            template=template,
        )
    )


def unregister_adapter(registry: Registry, settings: Settings, name: str) -> None:
    """Forget an adapter: it must be unpublished everywhere first."""
    adapter = registry.get(name)
    if adapter.servers:
        raise HipbotError(
            N_(
                "adapter {name!r} is still published on {servers}",
                name=name,
                servers=", ".join(adapter.servers),
            ),
            hint=N_("hipbot serve unpublish {name}", name=name),
        )
    registry.remove(name)
    store = child_dir(settings.adapters, name)
    if store == adapter.path.resolve() and store.is_dir():
        shutil.rmtree(store)


# What a publish did, as people read it; the result itself keeps the English word.
ACTIONS = {
    "loaded": N_("loaded"),
    "already loaded": N_("already loaded"),
    "reloaded": N_("reloaded"),
    "unloaded": N_("unloaded"),
    "not loaded": N_("not loaded"),
    "forgotten": N_("forgotten"),
    "error": N_("error"),
}


def action_name(action: str) -> str:
    """An action of :class:`PublishResult` in the current language."""
    return _(ACTIONS[action]) if action in ACTIONS else action


@dataclass(frozen=True)
class PublishResult:
    adapter: str
    server: str
    action: str  # one of ACTIONS
    lora_path: str = ""
    detail: str = ""
    warning: str = ""  # the adapter is prompted differently from the server's plain chat request


def _client(server: Server, timeout: float = 60.0) -> VllmClient:
    return VllmClient(server.url, api_key=server.api_key, timeout=timeout, name=server.name)


def _lora_path(adapter: Adapter, server: Server) -> tuple[str, bool, Path]:
    """(path as vLLM sees it, whether the files are a copy, that folder on this side)."""
    root = server.adapter_dir.resolve()
    source = adapter.path.resolve()
    if source.parent == root:  # the registry's store is the server's volume: nothing to copy
        return f"{server.vllm_adapter_dir.rstrip('/')}/{source.name}", False, source
    return f"{server.vllm_adapter_dir.rstrip('/')}/{adapter.name}", True, child_dir(root, adapter.name)


def _stage(adapter: Adapter, dest: Path, copied: bool) -> None:
    """Check the stored weights are still the registered ones and copy them where vLLM reads."""
    source = adapter.path.resolve()
    if sha256_file(source / WEIGHTS_FILE) != adapter.sha256:
        raise HipbotError(
            N_(
                "the stored weights of {adapter_name!r} changed since registration (sha256 mismatch)",
                adapter_name=adapter.name,
            ),
            hint=N_("register the adapter again under a new name"),
        )
    if copied and not (
        (dest / WEIGHTS_FILE).is_file() and sha256_file(dest / WEIGHTS_FILE) == adapter.sha256
    ):
        _copy_adapter(source, dest)


def _targets(registry: Registry, server: str | None, adapter: Adapter) -> list[Server]:
    if server is not None:
        return [registry.server(server)]
    servers = registry.servers()
    if not servers:
        raise HipbotError(N_("no vLLM server is registered"), hint="hipbot serve servers add NAME URL")
    matching = [
        s
        for s in servers
        if model_key(adapter.base_model) in {model_key(s.base_model), model_key(s.served_model)}
    ]
    if not matching:
        names = ", ".join(f"{s.name} ({s.base_model})" for s in servers)
        raise AdapterRejected(
            N_("adapter {adapter_name!r}", adapter_name=adapter.name),
            [
                N_(
                    "no server serves its base model {adapter_base_model} (servers: {names})",
                    adapter_base_model=adapter.base_model,
                    names=names,
                )
            ],
        )
    return matching


def template_warning(client: VllmClient, adapter: Adapter, server: Server) -> str:
    """Why a plain chat request to the adapter would be prompted unlike its training, or "".

    Both prompts of the probe question are tokenized by the server itself: the one rendered from
    the adapter's record, and what its chat template makes of a plain ``[user]`` request."""
    record = adapter.template
    if record is None:
        return ""
    trained = record.render(record.conversation(PROBE_QUESTION))
    plain = [{"role": "user", "content": PROBE_QUESTION}]
    try:
        same = client.tokenize(server.served_model, prompt=trained) == client.tokenize(
            server.served_model, messages=plain
        )
    except VllmRejected as exc:  # a server without /tokenize: the adapter is loaded all the same
        return f"could not compare {adapter.name}'s trained prompt with {server.name}'s: {exc.message}"
    if same:
        return ""
    system = f" with default_system {record.default_system!r}" if record.default_system else ""
    return (
        f"{adapter.name} was trained with the chat template {record.label}{system}, unlike the prompt "
        f"{server.name} builds for a plain chat request: hipbot (chat --adapter, /chat, answers) prompts "
        f"it as trained; other clients must send the prompt rendered from {template_record.RECORD_FILE} "
        "to /v1/completions"
    )


def publish_to(
    registry: Registry, adapter: Adapter, server: Server, *, check_template: bool = False
) -> PublishResult:
    """Load ``adapter`` on ``server`` unless it is there already; ``check_template`` compares its
    prompt with the server's plain chat prompt (``PublishResult.warning``)."""
    problems = server_problems(adapter, server)
    if problems:
        raise AdapterRejected(
            N_(
                "cannot publish {adapter_name!r} to {server_name}",
                adapter_name=adapter.name,
                server_name=server.name,
            ),
            problems,
        )
    lora_path, copied, local = _lora_path(adapter, server)
    with _client(server) as client:
        current = client.adapters().get(adapter.name)
        if current is not None and current.root == lora_path:
            action = "already loaded"  # the periodic sync lands here: no hashing, no copying
        else:
            _stage(adapter, local, copied)
            client.load_adapter(adapter.name, lora_path, inplace=current is not None)
            action = "reloaded" if current is not None else "loaded"
        warning = template_warning(client, adapter, server) if check_template else ""
    registry.mark_loaded(adapter.name, server.name, lora_path, copied)
    return PublishResult(adapter.name, server.name, action, lora_path, warning=warning)


def publish(registry: Registry, name: str, server: str | None = None) -> list[PublishResult]:
    """Load ``name`` on ``server`` (default: every server with its base model). Idempotent."""
    adapter = registry.get(name)
    return [
        publish_to(registry, adapter, target, check_template=True)
        for target in _targets(registry, server, adapter)
    ]


def register_and_publish(
    registry: Registry,
    settings: Settings,
    name: str,
    source: Path,
    *,
    server: str | None = None,
    base_model: str | None = None,
    job_id: str | None = None,
    owner: str | None = None,
) -> list[PublishResult]:
    """Register ``source`` as ``name`` and publish it. A publish that is refused everywhere leaves
    nothing behind: a registration made here is undone (no entry, no stored copy)."""
    existed = registry.find(name) is not None
    adapter = register_adapter(
        registry, settings, name, source, base_model=base_model, job_id=job_id, owner=owner
    )
    try:
        return publish(registry, adapter.name, server)
    except BaseException:
        if not existed and not registry.get(adapter.name).servers:
            unregister_adapter(registry, settings, adapter.name)
        raise


def unpublish(registry: Registry, name: str, server: str | None = None) -> list[PublishResult]:
    """Unload ``name`` from ``server`` (default: everywhere it is published) and forget the wish.

    A server that is down only loses the record (it forgot its adapters when it stopped)."""
    adapter = registry.get(name)
    names = [server] if server is not None else list(adapter.servers)
    results = []
    for server_name in names:
        target = registry.server(server_name)
        deployment = next(iter(registry.deployments(server=server_name, adapter=name)), None)
        try:
            with _client(target) as client:
                action = "unloaded" if client.unload_adapter(name) else "not loaded"
        except ServerDown as exc:
            action, detail = "forgotten", N_("server not reachable ({message})", message=exc.message)
        else:
            detail = ""
        registry.mark_unloaded(name, server_name)
        if deployment is not None and deployment.copied:
            copy = child_dir(target.adapter_dir, name)
            if copy.is_dir():
                shutil.rmtree(copy)
        results.append(
            PublishResult(name, server_name, action, deployment.lora_path if deployment else "", detail)
        )
    return results


@dataclass
class SyncReport:
    server: str
    healthy: bool
    results: list[PublishResult] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # loaded on the server, not in the registry
    error: str = ""


def sync(registry: Registry, server: str | None = None) -> list[SyncReport]:
    """Reload on each server every adapter the registry says it should have (after a restart)."""
    servers = [registry.server(server)] if server is not None else registry.servers()
    reports = []
    for target in servers:
        report = SyncReport(target.name, healthy=False)
        reports.append(report)
        with _client(target) as client:
            health = client.health()
            if not health.ok:
                report.error = health.error or "unhealthy"
                continue
            report.healthy = True
            try:
                loaded = client.adapters()
            except HipbotError as exc:
                report.error = exc.message
                continue
        wanted = registry.deployments(server=target.name)
        report.unknown = sorted(set(loaded) - {d.adapter for d in wanted})
        for deployment in wanted:
            try:
                result = publish_to(registry, registry.get(deployment.adapter), target)
            except HipbotError as exc:
                result = PublishResult(
                    deployment.adapter, target.name, "error", deployment.lora_path, exc.message
                )
            report.results.append(result)
    return reports
