"""What the verbs share: the TARGET argument, ``--json``, and printing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

target_argument = click.argument("target", metavar="TARGET")
json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


def load(target: str) -> Any:
    """The Cluster ``target`` names (see :func:`rl_lustre.cli._target.load_target`)."""
    from ._target import load_target

    return load_target(target)


def emit(data: Any, as_json: bool, text: str | Callable[[], str]) -> None:
    """Print ``data`` as JSON, or ``text`` for people."""
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo(text() if callable(text) else text)
