"""``check``: ask Google Cloud, read-only, whether TARGET's deployment can be created."""

from __future__ import annotations

import click

from ._common import emit, json_option, load, target_argument


@click.command()
@target_argument
@json_option
def check(target: str, as_json: bool) -> None:
    """Check, read-only, that TARGET's zone (and, with capacity_zones, each candidate zone)
    offers its machine and GPU types and Managed Lustre; that the GPU quota of each kind of
    capacity its policy tries covers its nodes (Cloud Quotas: GPUS_PER_GPU_FAMILY, its
    preemptible twin, GPUS_ALL_REGIONS); the Lustre capacity quota; and the reservations it
    names or the project sees.

    Exits 7 (quota or capacity) when something would make `up` fail, naming the quota
    to raise or the zones that work; `up` runs the same check before creating anything.
    """
    from ..errors import CapacityError
    from ._errors import exit_code

    cluster = load(target)
    report = cluster.check()
    emit(report.to_dict(), as_json, lambda: str(report))
    if not report.ok:
        raise click.exceptions.Exit(exit_code(CapacityError(report)))
