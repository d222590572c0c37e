"""``hipbot finetune``, ``hipbot coordinator`` and ``hipbot worker``: thin click front ends."""

from __future__ import annotations

import getpass
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hipbot.clihelp import Command, Group
from hipbot.config import load_settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _, localized, pad

if TYPE_CHECKING:
    from hipbot.jobs.finetune.backends import JobsBackend
    from hipbot.jobs.finetune.memory import MemoryEstimate
    from hipbot.jobs.finetune.spec import JobConfig, JobSpec


@click.group(cls=Group)
def finetune() -> None:
    """LoRA fine-tune jobs from LLaMA-Factory-style YAML files.

    \b
    hipbot finetune validate job.yaml        check a config, list every problem
    hipbot finetune estimate job.yaml        peak GPU memory, before any GPU is touched
    hipbot finetune run job.yaml             train here, no coordinator
    hipbot finetune submit job.yaml          queue on the coordinator for a worker
    hipbot finetune list | status ID | logs ID | cancel ID
    hipbot finetune keys [KEY...]            what each config key does here

    \b
    validate, estimate, run and submit take overrides after the config (or
    instead of it), as llamafactory-cli train does:
    hipbot finetune run job.yaml learning_rate=1e-5 logging_steps=1
    hipbot finetune run --model_name_or_path M --dataset D --lora_target q_proj,v_proj
    """


# validate/estimate/run/submit: [CONFIG] [OVERRIDES]...; options click does not know reach ARGS
OVERRIDABLE = {"ignore_unknown_options": True}
# `finetune keys`: what hipbot does with a key, as people read it (--kind takes the English word)
KEY_KINDS = {"honoured": N_("honoured"), "ignored": N_("ignored"), "refused": N_("refused")}
config_and_overrides = click.argument(
    "args", nargs=-1, type=click.UNPROCESSED, metavar="[CONFIG] [OVERRIDES]..."
)


def _load(args: tuple[str, ...]) -> JobConfig:
    """The job config: the YAML file (the first word, when it is not an override) with the
    overrides applied; an override naming one of this command's options says how to pass it."""
    from hipbot.jobs.finetune.spec import load_job, parse_overrides

    words = list(args)
    config = Path(words.pop(0)) if words and not words[0].startswith("-") and "=" not in words[0] else None
    command = click.get_current_context().command
    own = {
        name.lstrip("-").replace("-", "_")
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts
    }
    return load_job(config, parse_overrides(words, own_options=own))


def _estimate_for(
    spec: JobSpec, n_gpus: int = 1, precision: str = "bf16"
) -> tuple[MemoryEstimate | None, dict[str, Any] | None]:
    from hipbot.jobs.finetune.memory import estimate, load_model_config

    try:
        config = load_model_config(spec.model_name_or_path, allow_download=True)
    except Exception:  # noqa: BLE001 - a Hub name offline, a missing folder: the estimate is optional
        return None, None
    return estimate(spec, config, n_gpus, precision=precision), config


@finetune.command(context_settings=OVERRIDABLE)
@config_and_overrides
def validate(args: tuple[str, ...]) -> None:
    """Check CONFIG with OVERRIDES (keys, values, combinations, vLLM servability, datasets).

    OVERRIDES are key=value, --key value or --key=value, as llamafactory-cli train takes them,
    applied over CONFIG (or over the defaults without one); `hipbot finetune keys` lists the keys.
    """
    from hipbot.jobs.finetune.datasets import dataset_problems
    from hipbot.jobs.finetune.spec import SpecError

    job = _load(args)
    spec = job.spec
    # datasets are checked where they are: a job whose data is attached later has no folder here
    problems = dataset_problems(spec) if Path(spec.dataset_dir).is_dir() else []
    if problems:
        raise SpecError(problems, source=job.source)
    click.echo(
        _("ok: {model}, LoRA r={rank} alpha={alpha} on {targets}").format(
            model=spec.model_name_or_path,
            rank=spec.lora_rank,
            alpha=spec.alpha,
            targets=",".join(spec.lora_target),
        )
    )


@finetune.command("keys")
@click.argument("names", nargs=-1)
@click.option(
    "--kind", type=click.Choice(["honoured", "ignored", "refused"]), default=None, help=N_("Only this kind.")
)
def keys_cmd(names: tuple[str, ...], kind: str | None) -> None:
    """What each config key (NAMES, default: all) does here: honoured, ignored or refused, and why.

    The kinds, help texts and reasons are in the terminal's language; key names and values are not."""
    from hipbot.jobs.finetune.spec import KEYS
    from hipbot.jobs.finetune.spec.keys import unknown_key

    for name in names:
        if name not in KEYS:
            raise HipbotError(unknown_key(name))
    for row in (KEYS[n] for n in names or KEYS):
        if kind in (None, row.kind):
            why = f" ({localized(row.reason)})" if row.reason else ""
            click.echo(f"{row.key:34} {pad(_(KEY_KINDS[row.kind]), 8)} {localized(row.help)}{why}")


@finetune.command("estimate", context_settings=OVERRIDABLE)
@config_and_overrides
@click.option("--gpus", "n_gpus", type=int, default=1, show_default=True, help=N_("GPUs the job would use."))
@click.option("--json", "as_json", is_flag=True, help=N_("Print the parts as JSON."))
def estimate_cmd(args: tuple[str, ...], n_gpus: int, as_json: bool) -> None:
    """Estimate the peak GPU memory of CONFIG with OVERRIDES from the model's config.json."""
    spec = _load(args).spec
    est, _model_config = _estimate_for(spec, n_gpus, spec.precision(True))
    if est is None:
        raise HipbotError(
            _("cannot read the config of {model!r} (a local folder or a cached Hub model)").format(
                model=spec.model_name_or_path
            )
        )
    click.echo(json.dumps(est.as_dict(), indent=2) if as_json else est.summary())


@finetune.command(context_settings=OVERRIDABLE)
@config_and_overrides
@click.option(
    "--nproc", type=int, default=None, help=N_("Processes (one per GPU); default: every visible GPU.")
)
@click.option("--cpu", is_flag=True, help=N_("Train on the CPU (tiny models, tests)."))
@click.option(
    "--allow-remote-code", is_flag=True, help=N_("Let the config's trust_remote_code run model code.")
)
def run(args: tuple[str, ...], nproc: int | None, cpu: bool, allow_remote_code: bool) -> None:
    """Train CONFIG with OVERRIDES on this machine, no coordinator; the job (its effective config)
    is recorded in the local database."""
    from tqdm import tqdm

    from hipbot.jobs.finetune.gpu import check_runnable, detect
    from hipbot.jobs.finetune.queue import JobQueue
    from hipbot.jobs.finetune.runner import run_child
    from hipbot.jobs.finetune.trainer import write_job

    settings = load_settings()
    loaded = _load(args)
    spec = loaded.spec
    info = detect()
    if not info.gpus and not cpu:
        raise HipbotError(
            _("no GPU is visible to PyTorch"), hint=_("pass --cpu to train a tiny model on the CPU")
        )
    n_procs = nproc or (1 if cpu else max(1, info.count))
    est, model_config = _estimate_for(spec, n_procs, spec.precision(info.bf16))
    check_runnable(info, spec, est.total_gib if est and info.gpus and not cpu else None, allow_cpu=cpu)
    queue = JobQueue.open(settings.database)
    job = queue.submit(
        spec,
        loaded.text,
        owner=getpass.getuser(),
        model_config=model_config,
        memory=est.as_dict() if est else None,
        state="running",
        worker_id="local",
    )
    job_dir = settings.home / "jobs" / str(job.id)
    output_dir = Path(spec.output_dir) if spec.output_dir else job_dir / "output"
    write_job(
        job_dir,
        spec,
        output_dir=output_dir,
        allow_remote_code=allow_remote_code,
        device="cpu" if cpu else "auto",
    )
    if est:
        click.echo(_("job #{id}: {summary}").format(id=job.id, summary=est.summary()))
    bar = tqdm(total=None, unit=_("step"), dynamic_ncols=True, desc=_("job #{id}").format(id=job.id))

    def on_progress(line: dict[str, Any]) -> None:
        bar.total = line.get("max_steps") or bar.total
        bar.n = line["step"]
        bar.set_postfix(loss=f"{line['loss']:.4f}" if line.get("loss") is not None else "-")
        bar.refresh()
        queue.update(
            job.id,
            progress=line,
            progress_step=line["step"],
            progress_total=line.get("max_steps"),
            progress_loss=line.get("loss"),
        )

    def on_output(lines: list[str]) -> None:
        queue.log(job.id, "local", *lines)

    try:
        result = run_child(job_dir, spec, n_procs, on_progress=on_progress, on_output=on_output)
    except KeyboardInterrupt:
        bar.close()
        queue.finish(job.id, "cancelled", error="interrupted")
        raise HipbotError(
            _("job #{id} cancelled; rerun the same config to resume from its last checkpoint").format(
                id=job.id
            )
        ) from None
    bar.close()
    if result.state != "succeeded":
        queue.finish(job.id, "failed", error=result.error)
        raise HipbotError(
            _("job #{id} failed: {error}").format(id=job.id, error=result.error),
            hint=f"hipbot finetune logs {job.id}",
        )
    queue.finish(job.id, "succeeded", metrics=result.metrics, adapter_dir=str(output_dir))
    m = result.metrics
    click.echo(
        _(
            "job #{id} succeeded: {steps} steps, loss {first} -> {final}, {speed} tokens/s; adapter in {path}"
        ).format(
            id=job.id,
            steps=m.get("global_step"),
            first=m.get("first_loss"),
            final=m.get("final_loss"),
            speed=m.get("tokens_per_second"),
            path=output_dir,
        )
    )


# ------------------------------------------------------------------------------- through the coordinator


def _jobs(url: str | None, token: str | None) -> JobsBackend:
    """The coordinator (``--coordinator`` or HIPBOT_COORDINATOR_URL), else the local database."""
    from dataclasses import replace

    from hipbot.jobs.finetune.backends import jobs_backend

    settings = load_settings()
    if url:
        settings = replace(
            settings, coordinator_url=url, coordinator_token=token or settings.coordinator_token
        )
    elif token:
        settings = replace(settings, coordinator_token=token)
    return jobs_backend(settings)


coordinator_opts = [
    click.option("--coordinator", "url", default=None, help=N_("Coordinator URL (HIPBOT_COORDINATOR_URL).")),
    click.option("--token", default=None, help=N_("Client token (HIPBOT_COORDINATOR_TOKEN).")),
]


def _with_coordinator(f: Any) -> Any:
    for opt in reversed(coordinator_opts):
        f = opt(f)
    return f


@finetune.command(context_settings=OVERRIDABLE)
@config_and_overrides
@click.option(
    "--dataset",
    "dataset_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help=N_("Attach a dataset file (the config key dataset: write dataset=NAME)."),
)
@click.option("--priority", type=int, default=0)
@click.option("--owner", default=None, help=N_("Owner name (default: your login)."))
@_with_coordinator
def submit(
    args: tuple[str, ...],
    dataset_file: Path | None,
    priority: int,
    owner: str | None,
    url: str | None,
    token: str | None,
) -> None:
    """Queue CONFIG with OVERRIDES on the coordinator; a worker whose GPUs fit it will run it."""
    if not (url or load_settings().coordinator_url):
        raise HipbotError(
            _("no coordinator configured"), hint=_("set HIPBOT_COORDINATOR_URL or use `hipbot finetune run`")
        )
    if dataset_file is not None and not dataset_file.is_file():
        raise HipbotError(
            _("--dataset {path}: no such file; --dataset attaches a dataset file to the job").format(
                path=dataset_file
            ),
            hint=_("to set the config key dataset (names in dataset_info.json), write dataset={path}").format(
                path=dataset_file
            ),
        )
    from hipbot.jobs.finetune.spec import attach_deepspeed

    text = attach_deepspeed(_load(args))  # a DeepSpeed JSON file named here travels inside the config
    client = _jobs(url, token)
    data = dataset_file.read_bytes() if dataset_file else None
    reply = client.submit(
        text,
        owner=owner or getpass.getuser(),
        priority=priority,
        dataset=data,
        dataset_name=dataset_file.name if dataset_file else None,
    )
    click.echo(_("submitted job #{id} ({name})").format(id=reply.job.id, name=reply.job.name))
    if reply.warning:
        click.echo(_("warning: {message}").format(message=localized(reply.warning)))


@finetune.command("list")
@click.option("--owner", default=None)
@click.option("--all", "all_", is_flag=True, help=N_("Include finished jobs."))
@_with_coordinator
def list_cmd(owner: str | None, all_: bool, url: str | None, token: str | None) -> None:
    """List jobs (active ones unless --all)."""
    from hipbot.jobs.finetune.queue import ACTIVE, job_line

    states = None if all_ else ("queued", *ACTIVE)
    jobs = _jobs(url, token).list(owner=owner, states=states)
    if not jobs:
        click.echo(_("no jobs"))
    for job in jobs:
        click.echo(job_line(job))


# ``finetune status``: the job's fields shown, with their labels
STATUS_FIELDS = (
    ("id", N_("id")),
    ("name", N_("name")),
    ("state", N_("state")),
    ("owner", N_("owner")),
    ("worker_id", N_("worker")),
    ("attempts", N_("attempts")),
    ("memory_gib", N_("memory GiB")),
    ("progress_step", N_("step")),
    ("progress_total", N_("steps")),
    ("progress_loss", N_("loss")),
    ("checkpoint_step", N_("checkpoint")),
    ("adapter_dir", N_("adapter")),
    ("error", N_("error")),
    ("created_at", N_("created")),
    ("finished_at", N_("finished")),
)


@finetune.command()
@click.argument("job_id", type=int)
@_with_coordinator
def status(job_id: int, url: str | None, token: str | None) -> None:
    """Show one job: state, progress, memory estimate, worker, metrics, adapter."""
    from hipbot.jobs.finetune.queue import state_name

    job = _jobs(url, token).get(job_id)
    for key, label in STATUS_FIELDS:
        value = getattr(job, key)
        if value is not None:
            click.echo(f"{pad(_(label), 16)} {state_name(value) if key == 'state' else value}")
    if job.metrics:
        label = _("metrics")
        click.echo(f"{pad(label, 16)} {json.dumps(job.metrics)}")
    # the effective config (file + overrides) the job was recorded with: enough to rerun it
    click.echo(_("config:"))
    click.echo(textwrap.indent(job.spec_yaml.rstrip("\n"), "  "))


@finetune.command()
@click.argument("job_id", type=int)
@_with_coordinator
def cancel(job_id: int, url: str | None, token: str | None) -> None:
    """Cancel a job: at once if queued, within one heartbeat if running."""
    job = _jobs(url, token).cancel(job_id)
    state = _(job.state) if job.state == "cancelled" else _("{state} (stopping)").format(state=_(job.state))
    click.echo(_("job #{id}: {state}").format(id=job_id, state=state))


@finetune.command()
@click.argument("job_id", type=int)
@click.option("-f", "--follow", is_flag=True, help=N_("Keep printing until the job ends."))
@_with_coordinator
def logs(job_id: int, follow: bool, url: str | None, token: str | None) -> None:
    """Print a job's log lines."""
    jobs = _jobs(url, token)
    after = 0
    while True:
        rows = jobs.logs(job_id, after=after)
        for row in rows:
            click.echo(f"{row.ts} {row.source}: {row.line}")
            after = row.id
        if not follow or jobs.get(job_id).final:
            break
        time.sleep(2)


@finetune.command()
@_with_coordinator
def workers(url: str | None, token: str | None) -> None:
    """List the registered workers and their GPUs."""
    rows = _jobs(url, token).workers()
    if not rows:
        click.echo(_("no workers"))
    for w in rows:
        click.echo(
            f"{w.id} {w.name}: {w.gpu_count}x {w.backend} {w.memory_gib:.0f} GiB, "
            + _("last seen {when}").format(when=w.last_seen)
        )


@finetune.command()
@click.option("-n", "count", type=int, default=1, show_default=True)
@click.option(
    "--client", "client", default=None, help=N_("A client token for this user instead (acts only as them).")
)
@click.option(
    "--trusted", is_flag=True, help=N_("With --client: a front end that vouches for its users (a bot).")
)
@click.option(
    "--page",
    "page",
    default=None,
    help=N_("A read-only sign-in token for this person on the operator page (/ui)."),
)
@click.option("--admin", is_flag=True, help=N_("With --page: the token may act (cancel, revoke, publish)."))
def token(count: int, client: str | None, trusted: bool, page: str | None, admin: bool) -> None:
    """Create one-time worker registration tokens (or, with --client, a user's client token; with
    --page, a sign-in token for the operator page) in the coordinator's database."""
    from hipbot.jobs.finetune.queue import JobQueue
    from hipbot.jobs.finetune.web.store import create_page_token

    if client and page:
        raise HipbotError(_("--client and --page make different tokens: pass one of them"))
    queue = JobQueue.open(load_settings().database)
    for _n in range(count):
        if page:
            click.echo(create_page_token(queue.db, page, role="admin" if admin else "viewer"))
        else:
            click.echo(
                queue.create_client_token(client, trusted=trusted)
                if client
                else queue.create_registration_token()
            )


# ------------------------------------------------------------------------------- servers


@click.command(cls=Command)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8765, show_default=True)
@click.option(
    "--lease",
    "lease_s",
    type=float,
    default=90.0,
    show_default=True,
    help=N_("Seconds a job stays leased without a heartbeat."),
)
@click.option("--max-artifact-mb", type=int, default=4096, show_default=True)
@click.option(
    "--new-tokens", type=int, default=0, help=N_("Print this many one-time registration tokens at start.")
)
def coordinator(host: str, port: int, lease_s: float, max_artifact_mb: int, new_tokens: int) -> None:
    """Run the job coordinator HTTP API (workers connect outbound to it; OpenAPI at /docs)."""
    import uvicorn

    from hipbot.jobs.finetune.coordinator import CoordinatorConfig, create_app
    from hipbot.jobs.finetune.web import page_url

    settings = load_settings()
    cfg = CoordinatorConfig.from_settings(
        settings, lease_s=lease_s, max_artifact_bytes=max_artifact_mb * 2**20
    )
    app = create_app(cfg)
    for _n in range(new_tokens):
        click.echo(_("registration token: {token}").format(token=app.state.queue.create_registration_token()))
    click.echo(
        _("coordinator on http://{host}:{port} (database {path})").format(
            host=host, port=port, path=cfg.database
        ),
        err=True,
    )
    command = "`hipbot finetune token --page NAME [--admin]`"
    sign_in = _("{command} or the coordinator token").format(command=command) if cfg.client_token else command
    click.echo(
        _("operator page: {url} (sign in with {sign_in})").format(url=page_url(host, port), sign_in=sign_in),
        err=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


@click.command(cls=Command)
@click.option("--coordinator", "url", default=None, help=N_("Coordinator URL (HIPBOT_COORDINATOR_URL)."))
@click.option(
    "--token", default=None, help=N_("One-time registration token (first run) or saved credentials.")
)
@click.option("--name", default=None, help=N_("Name shown in /workers (default: host name)."))
@click.option(
    "--workdir",
    type=click.Path(path_type=Path),
    default=None,
    help=N_("Where jobs run (default: $HIPBOT_HOME/worker)."),
)
@click.option("--cpu", is_flag=True, help=N_("Offer the CPU (tiny models, tests)."))
@click.option(
    "--allow-remote-code",
    is_flag=True,
    help=N_("Allow jobs with trust_remote_code (runs model code from the Hub)."),
)
@click.option("--max-jobs", type=int, default=None, help=N_("Exit after this many jobs."))
@click.option("--heartbeat", "heartbeat_s", type=float, default=10.0, show_default=True)
@click.option(
    "--poll", "poll_s", type=float, default=20.0, show_default=True, help=N_("Long-poll wait per claim.")
)
def worker(
    url: str | None,
    token: str | None,
    name: str | None,
    workdir: Path | None,
    cpu: bool,
    allow_remote_code: bool,
    max_jobs: int | None,
    heartbeat_s: float,
    poll_s: float,
) -> None:
    """Lend this machine's GPUs: register, claim jobs, train, upload adapters."""
    import logging
    import socket

    from hipbot.jobs.finetune.worker import WorkerAgent

    settings = load_settings()
    url = url or settings.coordinator_url
    if not url:
        raise HipbotError(
            _("no coordinator URL"), hint=_("pass --coordinator URL or set HIPBOT_COORDINATOR_URL")
        )
    agent = WorkerAgent(
        url,
        workdir=workdir or settings.home / "worker",
        token=token or settings.registration_token,
        name=name or socket.gethostname(),
        allow_cpu=cpu,
        allow_remote_code=allow_remote_code,
        heartbeat_s=heartbeat_s,
        poll_s=poll_s,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        agent.run(max_jobs=max_jobs)
    except KeyboardInterrupt:
        sys.exit(130)
