"""The ``rl-lustre`` command group: verbs imported on first use, library errors as exit codes."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from ._errors import INTERRUPTED, exit_code

# verb -> "module:attribute" of its click.Command, imported only when the verb is used
# (or when the top-level --help lists the verbs).
VERBS: dict[str, str] = {
    "plan": "rl_lustre.cli.deploy:plan",
    "check": "rl_lustre.cli.check:check",
    "up": "rl_lustre.cli.deploy:up",
    "down": "rl_lustre.cli.deploy:down",
    "ls": "rl_lustre.cli.inventory:ls",
    "gc": "rl_lustre.cli.inventory:gc",
    "status": "rl_lustre.cli.jobs:status",
    "logs": "rl_lustre.cli.jobs:logs",
    "checkpoints": "rl_lustre.cli.jobs:checkpoints",
    "stop": "rl_lustre.cli.jobs:stop",
    "queue": "rl_lustre.cli.jobs:queue",
    "goodput": "rl_lustre.cli.goodput:goodput",
    "diagnose": "rl_lustre.cli.diagnose:diagnose",
    "results": "rl_lustre.cli.results:results",
}


class _Verbs(click.Group):
    """A group whose verbs are imported lazily and whose errors become exit codes."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = VERBS.get(cmd_name)
        if spec is None:
            return None
        module, _, attr = spec.partition(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """As click's, but its own errors (usage and the like) print ``error: ...`` as ours do."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            _show(exc)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            sys.exit(INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        from ..errors import RLLustreError

        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except RLLustreError as exc:
            # ProvisioningInterrupted is also a KeyboardInterrupt: its message says what was cleaned up.
            click.echo(f"error: {exc}", err=True)
            raise click.exceptions.Exit(exit_code(exc)) from exc
        except KeyboardInterrupt as exc:
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(INTERRUPTED) from exc


def _show(exc: click.ClickException) -> None:
    """Print a click error the way ours print: the usage when it is one, then ``error: <message>``."""
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        click.echo(ctx.get_usage(), err=True)
        click.echo(f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.\n", err=True)
    click.echo(f"error: {exc.format_message()}", err=True)


@click.group(cls=_Verbs, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="rl_lustre", prog_name="rl-lustre")
@click.option("-v", "--verbose", count=True, help="Log rl_lustre's INFO (-v) or DEBUG (-vv) lines to stderr.")
def cli(verbose: int) -> None:
    """Plan, start, inspect and tear down rl_lustre deployments.

    TARGET is a Cluster in a Python file, `path/to/script.py:name` (or
    `package.module:name`); the file runs as a module, without its `__main__` block.

    \b
    Exit codes: 0 ok, 2 bad arguments or configuration, 3 not ours, 4 not found or
    not up, 5 timeout, 6 no credentials or permission denied, 7 quota, 8 remote API
    error, 9 up() failed and rolled back, 10 down() left something, 11 job failed,
    130 interrupted.
    """
    if verbose:
        import logging

        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        log = logging.getLogger("rl_lustre")
        log.addHandler(handler)
        log.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
