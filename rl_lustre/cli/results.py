"""``results ls``: the runs a results location holds, read without any cluster."""

from __future__ import annotations

from typing import Any

import click

from ..oncluster.nemo_formats import checkpoint_name
from ._common import emit, json_option


@click.group()
def results() -> None:
    """Read what teardown exported: runs kept in a results location (Cluster.results)."""


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e12:,.2f} TB" if n >= 1e12 else f"{n / 1e9:,.2f} GB" if n >= 1e7 else f"{n / 1e6:,.2f} MB"


def _table(entries: list[Any]) -> str:
    rows = [("RUN", "STATE", "STEPS", "NEWEST CHECKPOINT", "SIZE", "COST", "EXPORTED")]
    for e in entries:
        steps = "-" if e.steps is None else f"{e.steps}/{e.total_steps if e.total_steps is not None else '?'}"
        newest = "-" if e.newest is None else f"{checkpoint_name(e.newest)} ({_size(e.newest_bytes)})"
        cost = "-" if e.usd is None else f"${e.usd:,.2f}"
        rows.append((e.run_id, e.state, steps, newest, _size(e.bytes), cost, e.exported_at or "-"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in range(len(r))).rstrip() for r in rows)


@results.command(name="ls")
@click.argument("location", metavar="gs://BUCKET/PREFIX|DIR")
@json_option
def ls(location: str, as_json: bool) -> None:
    """List the runs kept in LOCATION: each run's state, steps, newest checkpoint, size and cost.

    Reads only the location (Cloud Storage, or a directory): no cluster is needed.
    `rl_lustre.Run.from_results("LOCATION/<run>")` reads one run back in full.
    """
    from ..run_results import list_results

    entries = list_results(location)
    data = {"location": location, "runs": [e.to_dict() for e in entries]}
    emit(data, as_json, lambda: _table(entries) if entries else f"no exported run in {location}")
