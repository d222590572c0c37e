"""``hipbot hipify`` and ``hipbot mappings``: thin CLI over ``translate``, ``tree``, ``lints``,
``compile_check`` and ``mappings``. Accepts hipify-clang's option spellings so existing scripts keep working."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from hipbot.agents.hipify import mappings as mp
from hipbot.agents.hipify.report import HipifyOptions, HipifyReport, HipifyResult
from hipbot.agents.hipify.translate import translate, translate_path
from hipbot.agents.hipify.tree import (
    FileOutcome,
    collect_sources,
    output_path,
    project_names,
    read_source,
    read_stdin,
    write_file,
    write_stdout,
)
from hipbot.clihelp import Command, Group
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _, localized, ngettext

UNIT_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")


class _HipifyCommand(Command):
    """hipify-clang puts clang's own arguments after ``--``; keep them out of the input list,
    and accept ``-o=FILE`` / ``-o-dir=DIR`` as hipify-clang writes them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["clang_args"] = args[cut + 1 :]
            args = args[:cut]
        fixed = []
        for arg in args:
            if arg.startswith("-o="):
                fixed += ["-o", arg[3:]]
            elif arg.startswith("-o-dir="):
                fixed += ["--o-dir", arg[7:]]
            elif arg == "-o-dir":
                fixed.append("--o-dir")
            else:
                fixed.append(arg)
        return super().parse_args(ctx, fixed)


def _flag(*names: str, help: str) -> click.Option:
    return click.option(*names, is_flag=True, default=False, help=help)


@click.command(
    "hipify",
    cls=_HipifyCommand,
    context_settings={"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]},
)
@click.argument("inputs", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    help=N_("Write the one translation here."),
)
@click.option(
    "--o-dir",
    "--output-dir",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help=N_("Write translations under DIR, keeping the tree (-o-dir also works)."),
)
@_flag("--inplace", help=N_("Overwrite the inputs, keeping a .prehip backup of each."))
@_flag("--roc", "-roc", help=N_("Use rocBLAS/rocSPARSE/rocRAND/rocSOLVER names instead of hipBLAS/..."))
@_flag("--miopen", "-miopen", help=N_("Use MIOpen names for cuDNN."))
@_flag("--experimental", help=N_("Also translate APIs HIP marks experimental."))
@_flag("--hip-kernel-execution-syntax", help=N_("Rewrite kernel<<<...>>>(...) as hipLaunchKernelGGL(...)."))
@_flag("--cuda-kernel-execution-syntax", help=N_("Keep kernel<<<...>>>(...) (the default)."))
@_flag("--use-hip-data-types", help=N_("cudaDataType_t -> hipDataType even with --roc."))
@_flag(
    "--keep-strings",
    help=N_("Leave string literals untouched (by default exact CUDA API names in them are translated)."),
)
@_flag(
    "--amap",
    help=N_("Accepted for hipify-clang compatibility (this translator always converts as much as possible)."),
)
@_flag("--default-preprocessor", help=N_("Same as --skip-excluded-preprocessor-conditional-blocks."))
@_flag(
    "--skip-excluded-preprocessor-conditional-blocks",
    help=N_(
        "In #if/#ifdef branches the file's own macros rule out, rename names only (no launch/call rewrites)."
    ),
)
@_flag("--no-undocumented-features", help=N_("Do not rewrite half2 .x/.y as reinterpret_cast<half&>(...)."))
@_flag("--no-warnings-on-undocumented-features", help=N_("Accepted for hipify-clang compatibility."))
@_flag("--save-temps", help=N_("Accepted for hipify-clang compatibility."))
@click.option(
    "--temp-dir",
    "--cuda-path",
    "--clang-resource-directory",
    "-p",
    "ignored_values",
    multiple=True,
    help=N_("Accepted for hipify-clang compatibility (ignored)."),
)
@click.option(
    "-I",
    "include_dirs",
    multiple=True,
    help=N_("Include directory, used by --check (as after '--' in hipify-clang)."),
)
@click.option("-D", "defines", multiple=True, help=N_("Macro definition NAME[=VALUE], used by --check."))
@_flag("--print-stats", help=N_("Print translation statistics (to stderr)."))
@_flag("--print-stats-csv", help=N_("Write statistics as CSV beside each output (stderr for stdin/stdout)."))
@_flag("--examine", help=N_("Translate without writing anything and print statistics."))
@_flag(
    "--json", "as_json", help=N_("Print the whole report (and, for one file to stdout, the text) as JSON.")
)
@_flag("--no-lints", help=N_("Skip the AMD porting lints."))
@click.option(
    "--check",
    "check_arch",
    metavar="ARCH",
    help=N_("Compile the result with hipcc -fsyntax-only for ARCH (e.g. gfx90a)."),
)
@click.option(
    "--check-timeout", default=60.0, show_default=True, help=N_("Seconds allowed for one hipcc check.")
)
def hipify(
    inputs: tuple[str, ...],
    output: Path | None,
    out_dir: Path | None,
    inplace: bool,
    roc: bool,
    miopen: bool,
    experimental: bool,
    hip_kernel_execution_syntax: bool,
    cuda_kernel_execution_syntax: bool,
    use_hip_data_types: bool,
    keep_strings: bool,
    print_stats: bool,
    print_stats_csv: bool,
    examine: bool,
    as_json: bool,
    no_lints: bool,
    no_undocumented_features: bool,
    skip_excluded_preprocessor_conditional_blocks: bool,
    default_preprocessor: bool,
    check_arch: str | None,
    check_timeout: float,
    include_dirs: tuple[str, ...],
    defines: tuple[str, ...],
    **_accepted: object,
) -> None:
    """Translate CUDA source to HIP, like hipify-clang, with AMD porting lints.

    INPUTS are files, directories (recursive: x.cu -> x.hip beside it or under --o-dir) or '-' for
    stdin. One file prints its translation to stdout unless -o, --o-dir or --inplace is given.

    \b
    Examples:
      hipbot hipify kernel.cu > kernel.hip
      hipbot hipify --hip-kernel-execution-syntax --roc src/ --o-dir hip_src/
      cat k.cu | hipbot hipify - --check gfx90a
      hipbot hipify src/ -o-dir hip/ --check gfx90a -- -I include -DUSE_FP16

    --check compiles each translation where it was written (its folder and the -I folders are
    searched for the project's headers, translated ones under -o-dir).
    """
    ctx = click.get_current_context()
    emit = _Emit(
        as_json,
        examine,
        print_stats,
        print_stats_csv,
        check_arch,
        check_timeout,
        compile_check_args(include_dirs, defines, ctx.meta.get("clang_args", [])),
    )
    paths = _input_paths(inputs, inplace, output, out_dir)
    options = HipifyOptions(
        roc=roc,
        miopen=miopen,
        experimental=experimental,
        hip_kernel_execution_syntax=hip_kernel_execution_syntax,
        cuda_kernel_execution_syntax=cuda_kernel_execution_syntax,
        use_hip_data_types=use_hip_data_types,
        translate_strings=not keep_strings,
        lint=not no_lints,
        undocumented_features=not no_undocumented_features,
        skip_excluded_blocks=skip_excluded_preprocessor_conditional_blocks or default_preprocessor,
    )
    if "-" in paths:
        if len(paths) > 1:
            raise HipbotError(_("'-' (stdin) cannot be mixed with other inputs"))
        if inplace:
            raise HipbotError(_("--inplace needs files, not stdin"))
        _finish(_emit_single(translate(read_stdin(), options, "<stdin>"), output, None, emit))
        return

    sources = collect_sources([Path(p) for p in paths])
    if not sources:
        raise HipbotError(_("no CUDA/C++ source files found in the inputs"))
    single = len(sources) == 1 and sources[0][1] is None
    if single and not inplace and not out_dir:
        path = sources[0][0]
        _finish(_emit_single(translate(read_source(path), options, str(path)), output, path, emit))
        return
    if output:
        raise HipbotError(_("-o takes one input file; use --o-dir DIR for several files or directories"))
    _translate_tree(sources, options, out_dir, inplace, emit)


@dataclass(frozen=True)
class _Emit:
    """How results are shown, saved and checked: the output flags, shared by every path."""

    as_json: bool
    examine: bool
    print_stats: bool
    print_stats_csv: bool
    check_arch: str | None
    check_timeout: float
    check_args: tuple[list[str], list[str]]  # (include folders, other hipcc arguments)


def _input_paths(
    inputs: tuple[str, ...], inplace: bool, output: Path | None, out_dir: Path | None
) -> list[str]:
    """The inputs that are paths (or '-'); options this CLI does not know are reported and ignored."""
    unknown = [a for a in inputs if a.startswith("-") and a != "-"]
    paths = [a for a in inputs if not (a.startswith("-") and a != "-")]
    for opt in unknown:
        click.echo("hipify: " + _("ignoring unknown option {option}").format(option=opt), err=True)
    if not paths:
        raise HipbotError(_("no input given"), hint=_("hipbot hipify FILE|DIR|- (see hipbot hipify --help)"))
    if inplace and (output or out_dir):
        raise HipbotError(_("--inplace cannot be combined with -o or --o-dir"))
    if output and out_dir:
        raise HipbotError(_("give either -o FILE or --o-dir DIR, not both"))
    return paths


def _translate_tree(
    sources: list[tuple[Path, Path | None]],
    options: HipifyOptions,
    out_dir: Path | None,
    inplace: bool,
    emit: _Emit,
) -> None:
    """Translate several files (or one into --o-dir / --inplace), then compile-check the written tree."""
    if len(sources) > 1:
        names, kernels = project_names([s for s, _ in sources])
        renamed = tuple(
            (str(src.resolve()), out.name)
            for src, root in sources
            if (out := output_path(src, root, out_dir, inplace)).name != src.name
        )
        options = dataclasses.replace(
            options, project_names=names, project_kernels=kernels, renamed_sources=renamed
        )
    failed = 0
    records = []
    to_check = []
    for source, root in sources:
        outcome = translate_path(
            source, options, root=root, out_dir=out_dir, inplace=inplace, write=not emit.examine
        )
        record = _tree_record(outcome, inplace, emit)
        failed += outcome.error is not None
        if emit.check_arch and outcome.result is not None and outcome.result.ok:
            to_check.append((source, outcome, record))
        records.append(record)
    # compiled once the whole tree is written, so that each finds the translated headers it includes;
    # headers are compiled through the translation units that include them (alone when there are none)
    units = [c for c in to_check if c[0].suffix in UNIT_SUFFIXES] or to_check
    check_args = emit.check_args
    if out_dir is not None:  # -I folders inside an input tree mean their translations
        roots = {root for _, root in sources if root is not None}
        check_args = ([_translated_dir(d, roots, out_dir) for d in check_args[0]], check_args[1])
    for source, outcome, record in units:
        where = (outcome.output or source).parent
        check = _run_check(
            outcome.result.text, emit.check_arch, emit.check_timeout, emit.as_json, check_args, where
        )
        record["check"] = check.to_dict()
        failed += not check.ok
    if emit.as_json:
        click.echo(json.dumps({"files": records}, indent=2))
    if failed:
        raise HipbotError(
            ngettext(
                "{failed} of {files} file failed (see the messages above)",
                "{failed} of {files} files failed (see the messages above)",
                len(sources),
            ).format(failed=failed, files=len(sources))
        )


def _tree_record(outcome: FileOutcome, inplace: bool, emit: _Emit) -> dict:
    """Report one file of a tree (errors, findings, stats, CSV) and return its JSON record."""
    source = outcome.source
    record: dict = {"file": str(source), "output": str(outcome.output) if outcome.output else None}
    if outcome.error:
        record["error"] = outcome.error
        error = localized(outcome.error)
        text = _("{error} (file left unchanged)").format(error=error) if inplace else error
        click.echo(_("error: {message}").format(message=text), err=True)
    if outcome.result is not None:
        record.update(outcome.result.to_dict())
        if not emit.as_json:
            _print_findings(outcome.result)
        if emit.print_stats or emit.examine:
            _print_stats(outcome.result.report)
        if emit.print_stats_csv and not emit.examine:
            _write_csv(outcome.result.report, Path(str(outcome.output or source) + ".csv"))
    if outcome.output and not emit.as_json and not emit.examine:
        click.echo(f"{source} -> {outcome.output}", err=True)
    return record


def _translated_dir(folder: str, roots: set[Path], out_dir: Path) -> str:
    """``src/Common`` given with ``-I`` while ``src/`` is translated to ``out/``: ``out/Common``."""
    path = Path(folder).resolve()
    for root in roots:
        try:
            rel = path.relative_to(root.resolve())
        except ValueError:
            continue
        return str(out_dir / rel)
    return folder


def _finish(failed: bool) -> None:
    """Exit status 1 (through the CLI's error path) when a check or translation failed."""
    if failed:
        raise HipbotError(_("hipify finished with errors (see the messages above)"))


def _emit_single(result: HipifyResult, output: Path | None, source: Path | None, emit: _Emit) -> bool:
    """Write one translation to stdout or -o; returns True when something failed."""
    failed = False
    for err in result.report.errors:
        click.echo(
            _("error: {message}").format(message=_("{error} (left as written)").format(error=localized(err))),
            err=True,
        )
    record = result.to_dict()
    if not emit.as_json:
        _print_findings(result)
    if not emit.examine:
        if output is not None:
            write_file(output, result.text)
        elif not emit.as_json:
            write_stdout(result.text)
    if emit.print_stats or emit.examine:
        _print_stats(result.report)
    if emit.print_stats_csv and not emit.examine:
        target = output or (Path(str(source) + ".hip.csv") if source else None)
        if target is None:
            click.echo(_csv_text(result.report), err=True, nl=False)
        else:
            _write_csv(result.report, target if target.suffix == ".csv" else Path(str(target) + ".csv"))
    if emit.check_arch:
        where = (output or source).parent if (output or source) else None
        check = _run_check(
            result.text, emit.check_arch, emit.check_timeout, emit.as_json, emit.check_args, where
        )
        record["check"] = check.to_dict()
        failed = not check.ok
    if emit.as_json:
        if output is None and not emit.examine:
            record["text"] = result.text
        click.echo(json.dumps(record, indent=2))
    return failed


def _print_findings(result: HipifyResult) -> None:
    report = result.report
    for u in report.unconverted:
        if u.reason == "unknown":
            continue
        left = _("'{name}' left unconverted: {detail}").format(name=u.name, detail=_(u.detail))
        click.echo(f"{report.filename}:{u.line}:{u.col}: warning: {left}", err=True)
    for lint in result.lints:  # "warning:"/"error:" stay as compilers write them, for editors to read
        message, hint = lint.localized()
        click.echo(
            f"{lint.filename}:{lint.line}:{lint.col}: {lint.severity}: [{lint.id}] {message} "
            f"({lint.stage}); {hint} [{lint.doc}]",
            err=True,
        )


def _print_stats(report: HipifyReport) -> None:
    click.echo(f"[HIPIFY] info: file '{report.filename}' statistics:", err=True)
    for name, value in report.stats_rows():
        click.echo(f"  {name}: {value}", err=True)


def _csv_text(report: HipifyReport) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=";", lineterminator="\n")
    writer.writerow(["file", report.filename])
    for row in report.stats_rows():
        writer.writerow(row)
    return buf.getvalue()


def _write_csv(report: HipifyReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_csv_text(report), encoding="utf-8")


def compile_check_args(
    include_dirs: tuple[str, ...], defines: tuple[str, ...], clang_args: list[str]
) -> tuple[list[str], list[str]]:
    """(include folders, other hipcc arguments) for --check from -I/-D and what follows ``--``."""
    from hipbot.agents.hipify import compile_check

    passed = compile_check.compiler_args(clang_args)
    clang_includes = [a[2:] for a in passed if a.startswith("-I")]
    extra = [f"-D{d}" for d in defines] + [a for a in passed if not a.startswith("-I")]
    return [*include_dirs, *clang_includes], extra


def _run_check(
    text: str,
    arch: str,
    timeout: float,
    quiet: bool,
    check_args: tuple[list[str], list[str]] = ([], []),
    where: Path | None = None,
):
    from hipbot.agents.hipify import compile_check

    include_dirs, extra = check_args
    if where is not None:
        include_dirs = [str(where), *include_dirs]
    check = compile_check.check(text, arch, timeout, include_dirs, extra)
    if not quiet:
        click.echo(check.summary(), err=True)
        for diag in check.diagnostics:
            if diag.severity != "note":
                click.echo(
                    f"  {diag.format()}" + (f"\n    | {diag.source_line}" if diag.source_line else ""),
                    err=True,
                )
    return check


# --------------------------------------------------------------------------------------------------
@click.group("mappings", cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def mappings() -> None:
    """Look up or regenerate the bundled CUDA -> HIP mapping data (HIPIFY's tables)."""


@mappings.command("show")
@click.argument("names", nargs=-1, required=True)
@_flag("--json", "as_json", help=N_("Print the rows as JSON."))
def mappings_show(names: tuple[str, ...], as_json: bool) -> None:
    """Show the mapping rows of CUDA (or HIP/roc) names, e.g. cudaMemcpyToSymbol."""
    from dataclasses import asdict

    found = []
    for name in names:
        rows = mp.lookup(name)
        if not rows:
            click.echo(_("{name}: not in the mapping tables").format(name=name), err=True)
        found.extend(rows)
    if as_json:
        click.echo(json.dumps([asdict(r) for r in found], indent=2))
    else:
        for r in found:
            roc = f", {r.roc_kind or 'ROC'}: {r.roc}" if r.roc else ""
            added = f" (HIP {r.hip_added})" if r.hip_added else ""
            click.echo(
                f"{r.cuda} -> {r.hip or _('(unsupported)')}{added}{roc}  [{r.status}; {r.library}: {r.section}]"
            )
    if not found:
        sys.exit(1)


@mappings.command("info")
def mappings_info() -> None:
    """Where the bundled data comes from: upstream commit, ref, license, row counts."""
    from collections import Counter

    table = mp.load()
    meta = table.meta
    click.echo(_("data file: {path}").format(path=mp.DATA_FILE))
    click.echo(
        _("source: {source} commit {commit} ref {ref}").format(
            source=meta.get("source"), commit=meta.get("commit"), ref=meta.get("ref")
        )
    )
    click.echo(_("license: {license}; rows: {rows}").format(license=meta.get("license"), rows=len(table)))
    for lib, n in sorted(Counter(r.library for r in table.rows).items()):
        click.echo(f"  {lib}: {n}")


@mappings.command("update")
@click.option(
    "--docs",
    "docs",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help=N_("A HIPIFY checkout, its docs/tables folder, or the docs corpus root."),
)
@_flag("--download", help=N_("Fetch docs/tables from the upstream repository (needs --ref)."))
@click.option("--ref", help=N_("Upstream git ref for --download, e.g. rocm-6.3.0."))
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help=N_("Where to write the data file (default: the bundled one)."),
)
def mappings_update(docs: Path | None, download: bool, ref: str | None, output: Path | None) -> None:
    """Regenerate the mapping data file from HIPIFY's tables (--docs PATH or --download --ref REF)."""
    if bool(docs) == bool(download):
        raise HipbotError(_("give exactly one of --docs PATH or --download --ref REF"))
    if download:
        if not ref:
            raise HipbotError(_("--download needs --ref, e.g. --ref rocm-6.3.0"))
        data = mp.download(ref)
    else:
        data = mp.generate(docs)
    target = mp.write_data_file(data, output or mp.DATA_FILE)
    mp.load.cache_clear()
    meta = data["meta"]
    click.echo(
        _("wrote {path}: {rows} rows from {source} (commit {commit}, ref {ref})").format(
            path=target,
            rows=meta["rows"],
            source=meta["source"],
            commit=meta.get("commit"),
            ref=meta.get("ref"),
        )
    )
