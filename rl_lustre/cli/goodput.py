"""``goodput``: where a run's or a deployment's GPU-node-seconds went, and what they cost."""

from __future__ import annotations

from typing import Any

import click

from ._common import emit, json_option, load
from .deploy import load_prices, prices_option


@click.command()
@click.argument("target", metavar="TARGET|NAME")
@click.argument("job_id", metavar="[JOB_ID]", required=False)
@click.option(
    "--since",
    metavar="WHEN",
    help="Without JOB_ID: from WHEN (ISO 8601, or a duration before now: "
    "90s, 30m, 2h, 1d); by default from the first billed second known.",
)
@click.option("--until", metavar="WHEN", help="Without JOB_ID: up to WHEN (as --since); by default now.")
@click.option("--project", help="With NAME: the project of the deployment, found by its labels.")
@click.option("--zone", help="With NAME: its zone (checked against what is found).")
@prices_option
@json_option
def goodput(
    target: str,
    job_id: str | None,
    since: str | None,
    until: str | None,
    project: str | None,
    zone: str | None,
    prices_file: str | None,
    as_json: bool,
) -> None:
    """Show where JOB_ID's GPU-node-seconds went (capacity, startup, training, checkpoint,
    validation, lost, idle, unattributed), in node-hours and USD; without JOB_ID, every run's
    on the deployment and its own idle time over a window.

    `goodput NAME --project P [--zone Z]` finds the deployment NAME by its labels, without
    the script.
    """
    from ..errors import ConfigError

    if job_id is not None:
        for flag, value in (("--since", since), ("--until", until)):
            if value is not None:
                raise ConfigError(
                    "rl-lustre goodput",
                    flag,
                    value,
                    "is for a deployment's ledger over a window, not with a JOB_ID (a run's ledger is its whole life)",
                )
    cluster = _cluster(target, project, zone)
    prices = load_prices(prices_file)
    if job_id is not None:
        ledger = cluster.attach(job_id).goodput(prices=prices)
        emit(ledger.to_dict(), as_json, lambda: str(ledger))
        return
    ledger = cluster.goodput(since=since, until=until, prices=prices)
    emit(ledger.to_dict(), as_json, lambda: _cluster_text(ledger))


def _cluster(target: str, project: str | None, zone: str | None) -> Any:
    from ..errors import ConfigError

    if ":" in target:
        if project is not None or zone is not None:
            raise ConfigError(
                "rl-lustre goodput",
                "--project" if project is not None else "--zone",
                project or zone,
                "is for `goodput NAME` (found by its labels), not for a TARGET file",
            )
        return load(target)
    if project is None:
        raise ConfigError(
            "rl-lustre goodput",
            "--project",
            None,
            f"is required with a deployment NAME ({target!r}); or give a TARGET path/to/script.py:name",
        )
    from ..inventory import find_deployment

    return find_deployment(target, project=project, zone=zone).cluster()


def _cluster_text(ledger: Any) -> str:
    lines = [str(ledger)]
    if ledger.runs:
        lines += ["", f"  {'run':<40}{'status':<11}{'node-h':>8}{'goodput':>9}{'lost':>7}{'USD':>11}"]
        for r in ledger.runs:
            total = r.total_seconds
            lost = 0.0 if total <= 0 else r.seconds["lost"] / total
            lines.append(
                f"  {r.name:<40}{r.status or '':<11}{total / 3600:>8.3f}{r.goodput_fraction:>9.0%}"
                f"{lost:>7.0%}{'$' + format(r.total_usd, ',.2f'):>11}"
            )
    return "\n".join(lines)
