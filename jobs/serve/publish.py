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

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.config import Settings
from hipbot.db import utcnow
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _
from hipbot.jobs.finetune import template_record
from hipbot.jobs.finetune.template_record import PROBE_QUESTION
from hipbot.jobs.serve.adapter_files import (
    ADAPTER_FILES,
    WEIGHTS_FILE,
    AdapterRejected,
    inspect_adapter,
    sha256_file,
)
from hipbot.jobs.serve.registry import Adapter, Registry, Server, validate_name
from hipbot.jobs.serve.vllm_client import ServerDown, VllmClient, VllmRejected


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
