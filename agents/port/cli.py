"""``hipbot port SRC -o OUT``: the whole project to HIP, compiled and repaired for an AMD GPU."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from hipbot.agents.hipify.compile_check import ARCH_RE
from hipbot.agents.hipify.report import HipifyOptions
from hipbot.agents.port import rocm
from hipbot.agents.port.compiler import CompileSettings
from hipbot.agents.port.pipeline import PortOptions
from hipbot.agents.port.pipeline import port as run_port
from hipbot.clihelp import Command
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _, localized, ngettext

log = logging.getLogger(__name__)


@click.command("port", cls=Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("src", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help=N_("New or empty output folder."),
)
@click.option("--arch", default=None, help=N_("AMD GPU target (default: the local GPU, else gfx90a)."))
@click.option(
    "--rocm",
    "rocm_version",
    default="auto",
    show_default=True,
    help=N_("Target ROCm: auto (the installed hipcc) or e.g. 5.2, 6.3."),
)
@click.option(
    "--build", is_flag=True, help=N_("Compile each unit to an object file instead of -fsyntax-only.")
)
@click.option(
    "--max-rounds",
    default=4,
    show_default=True,
    type=click.IntRange(0, 20),
    help=N_("Repair rounds per unit."),
)
@click.option("--no-rules", is_flag=True, help=N_("Translate and compile only (what hipify alone gives)."))
@click.option(
    "--llm/--no-llm",
    default=None,
    help=N_("Ask the model (HIPBOT_LLM_URL) about units the rules leave failing; on when the URL is set."),
)
@click.option(
    "--roc", "-roc", is_flag=True, help=N_("Use rocBLAS/rocSPARSE/... names instead of hipBLAS/...")
)
@click.option(
    "--jobs",
    "-j",
    default=0,
    type=click.IntRange(0, 256),
    help=N_("Parallel compiles (default: one per CPU)."),
)
@click.option("--timeout", default=120.0, show_default=True, help=N_("Seconds allowed for one hipcc run."))
@click.option("--json", "as_json", is_flag=True, help=N_("Print the report as JSON on stdout."))
@click.option("--diff", "show_diff", is_flag=True, help=N_("Print every edit beyond translation as a diff."))
def port(
    src: Path,
    out: Path,
    arch: str | None,
    rocm_version: str,
    build: bool,
    max_rounds: int,
    no_rules: bool,
    llm: bool | None,
    roc: bool,
    jobs: int,
    timeout: float,
    as_json: bool,
    show_diff: bool,
) -> None:
    """Port the CUDA project in SRC to HIP into OUT and make it compile for an AMD GPU.

    Sources, headers and build files (CMake, Makefiles, shell scripts calling nvcc) are translated;
    each translation unit the build files name (every .cu without them) is compiled with hipcc;
    known causes are repaired (shims for APIs newer than the target ROCm, CUDA-only headers,
    OpenMP, the project's own headers...) while a round fixes something. Every edit beyond the
    translation is reported as a diff with its reason, every unit still failing with its cause.

    \b
    Examples:
      hipbot port cuda_project/ -o hip_project/
      hipbot port src/ -o out/ --arch gfx942 --rocm 6.3 --json > report.json
    """
    from hipbot.config import load_settings

    arch = arch or rocm.local_arch() or "gfx90a"
    if not ARCH_RE.match(arch):
        raise HipbotError(
            _("not an AMD GPU target: {arch!r}").format(arch=arch),
            hint=_("e.g. --arch gfx90a, gfx942, gfx1100"),
        )
    if timeout <= 0:
        raise HipbotError(_("--timeout must be positive"))
    rocm.resolve(rocm_version)  # a bad version fails before anything is written
    options = PortOptions(
        arch=arch,
        rocm=rocm_version,
        build=build,
        max_rounds=max_rounds,
        timeout=timeout,
        jobs=jobs,
        rules=not no_rules,
        hipify=HipifyOptions(roc=roc),
    )
    settings = load_settings()
    model = None
    if llm or (llm is None and settings.llm_url):
        from hipbot.agents.port.llm import model_for

        model = model_for(settings, CompileSettings(arch, timeout, build))
    report = run_port(src, out, options, model)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(report.table(), err=True)
    if show_diff:
        for unit in report.units:
            for edit in unit.edits:
                click.echo(f"# {unit.source}: {localized(edit.reason)} [{edit.doc}]", err=as_json)
                click.echo(edit.diff, err=as_json)
    failed = report.summary()["failed"]
    if failed:
        raise HipbotError(
            ngettext(
                "{failed} of {units} unit still fails to compile (causes above)",
                "{failed} of {units} units still fail to compile (causes above)",
                len(report.units),
            ).format(failed=failed, units=len(report.units))
        )
