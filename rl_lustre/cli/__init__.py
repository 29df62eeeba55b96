"""The ``rl-lustre`` console script: a thin command line over the library.

Every verb loads a deployment (a ``Cluster`` in a Python file, named as
``path/to/script.py:name``) or finds one by its labels, calls the library, and prints
the result for people or, with ``--json``, for programs. Errors are the library's:
each error class has its own exit code (see :mod:`rl_lustre.cli._errors`).

Verbs live in their own modules and are imported only when used, so
``rl-lustre --help`` stays fast. To add a verb, write a module here that defines a
``click.Command`` and list it in ``VERBS`` of :mod:`rl_lustre.cli._app`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``rl-lustre`` with ``argv`` (default: the process's arguments) and exit.

    Example::

        main(["plan", "examples/quickstart_cluster.py:cluster", "--json"])
    """
    from ._app import cli

    cli.main(args=None if argv is None else list(argv), prog_name="rl-lustre")
