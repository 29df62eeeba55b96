"""``ls`` and ``gc``: deployments found in a project by their labels."""

from __future__ import annotations

import time
from typing import Any

import click

from ..plankeys import PRELOAD_IMAGE_KEY
from ._common import emit, json_option
from .deploy import load_prices, prices_option

project_option = click.option("--project", help="The Google Cloud project to look in (all zones).")
target_or_project = click.argument("target", metavar="[TARGET]", required=False)


def _project(verb: str, target: str | None, project: str | None) -> str:
    """The project to look in: ``--project``, or that of the Cluster ``TARGET`` names."""
    from ..errors import ConfigError
    from ._common import load

    if target is None:
        if project is None:
            raise click.UsageError(
                f"give the project: `rl-lustre {verb} --project P`, or a script's "
                f"cluster: `rl-lustre {verb} path/to/script.py:cluster`"
            )
        return project
    cluster = load(target)
    if cluster.backend != "gke":
        raise ConfigError(
            "rl-lustre",
            "TARGET",
            target,
            f"is a local cluster; `{verb}` looks for deployments in a Google Cloud project",
        )
    if project is not None and project != cluster.project:
        raise click.UsageError(
            f"--project {project} is not the project of {target} ({cluster.project}); give one or the other"
        )
    assert cluster.project is not None
    return str(cluster.project)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _table(deployments: list[Any], prices: Any) -> str:
    now = time.time()
    rows = [("NAME", "STATE", "ZONE", "AGE", "$/HOUR", "RESOURCES")]
    for d in deployments:
        cost = d.cost(prices)
        rows.append(
            (
                d.name,
                d.state,
                d.zone or d.region or "-",
                _age(d.age_seconds(now)),
                f"{cost.total_usd_per_hour:,.2f}",
                ", ".join(f"{r.key}:{r.short_name}" for r in d.resources),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(5)]
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in range(5)) + "  " + r[5] for r in rows)


@click.command(name="ls")
@target_or_project
@project_option
@json_option
@prices_option
@click.option(
    "--warm-start",
    "warm_start",
    metavar="gs://BUCKET/PREFIX",
    default=None,
    help="Also list what the warm-start export there holds (Cluster.warm_start), from its manifest.",
)
def ls(target: str | None, project: str | None, as_json: bool, prices_file: str | None, warm_start: str | None) -> None:
    """List every deployment in a project found by our labels, partial ones too: the
    project of --project, or of the Cluster TARGET names (`path/to/script.py:name`).

    Shows each one's state (its GKE cluster's status, or PARTIAL without one), zone,
    age, $/hour and resources; with --warm-start, the export in that bucket, file by file
    with sizes.
    """
    from ..inventory import find_deployments
    from ..shared import find_shared, find_warm_start

    project = _project("ls", target, project)
    prices = load_prices(prices_file)
    export = find_warm_start(warm_start) if warm_start else None
    found = find_deployments(project)
    shared = find_shared(project)
    total = sum(d.cost(prices).total_usd_per_hour for d in found)
    data = {
        "project": project,
        "usd_per_hour": round(total, 4),
        "deployments": [d.to_dict(prices) for d in found],
        "shared": shared.to_dict(prices),
    }
    if warm_start:
        data["warm_start"] = export.to_dict(prices) if export is not None else {"uri": warm_start, "objects": []}

    def text() -> str:
        out = (
            f"{_table(found, prices)}\n\n{len(found)} deployment(s), ${total:,.2f}/hour"
            if found
            else f"no rl_lustre deployment in project {project}"
        )
        return out + _shared_table(shared, prices) + (_warm_table(warm_start, export, prices) if warm_start else "")

    emit(data, as_json, text)


def _warm_table(uri: str, export: Any, prices: Any) -> str:
    """ls's section of a warm-start export: its totals, then every file with its size."""
    if export is None:
        return f"\n\nWARM START {uri}: nothing exported there yet"
    lines = [
        f"\n\nWARM START {uri}: {len(export.objects)} file(s), {export.total_bytes / 1e9:,.1f} GB, "
        f"${export.usd_per_month(prices):,.2f}/month; exported {export.exported_at} by {export.deployment}"
    ]
    width = max((len(p) for p, _ in export.objects), default=0)
    lines += [f"  {p.ljust(width)}  {n / 1e9:10.3f} GB" for p, n in export.objects]
    return "\n".join(lines)


def _shared_table(shared: Any, prices: Any) -> str:
    """ls's section of what deployments share (kept by down())."""
    if not shared.images and not shared.builders:
        return ""
    rows = [
        (
            PRELOAD_IMAGE_KEY,
            i.short_name,
            f"{i.image}@{i.digest[:19]}",
            f"{i.disk_gb} GB",
            f"${i.usd_per_month(prices):,.2f}/month",
            i.status,
            f"used by {', '.join(i.used_by)}" if i.used_by else "unused",
        )
        for i in shared.images
    ]
    rows += [("preload-build", b.name.rsplit("/", 1)[-1], b.kind, "", "", "temporary", "") for b in shared.builders]
    widths = [max(len(r[c]) for r in rows) for c in range(6)]
    lines = ["  ".join(r[c].ljust(widths[c]) for c in range(6)) + "  " + r[6] for r in rows]
    return "\n\nSHARED (kept between deployments; rl-lustre gc --preload-images deletes unused ones)\n" + "\n".join(
        line.rstrip() for line in lines
    )


@click.command()
@target_or_project
@project_option
@json_option
@click.option("--yes", is_flag=True, help="Delete what is listed (without it, nothing is deleted).")
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    default=15.0,
    show_default=True,
    help="Minutes: leave younger partial deployments alone (their up() may be under way).",
)
@click.option(
    "--preload-images",
    is_flag=True,
    help="Also the preload disk images no node pool boots from (kept by down() for the next deployment).",
)
@click.option(
    "--discard-results",
    is_flag=True,
    help="Also the volumes down() kept because their runs' results were not exported (they are lost).",
)
def gc(
    target: str | None,
    project: str | None,
    as_json: bool,
    yes: bool,
    older_than: float,
    preload_images: bool,
    discard_results: bool,
) -> None:
    """List resources labelled as ours in a project (--project, or TARGET's) that no longer
    form a whole deployment (no GKE cluster: a Lustre instance or a network left after a
    crash), and the preload image builder's VMs and disks older than a build can take;
    delete them with --yes. With --preload-images, also the preload disk images no node
    pool uses.

    Nothing without our labels is ever touched; deletion goes through the deployment's
    plan, in reverse dependency order, as `down` does. An image a node pool boots from is
    never deleted, nor a volume `down` kept for results not exported ("kept: results not
    exported" in `ls`) without --discard-results.
    """
    from ..garbage import collect_garbage
    from ..shared import collect_shared

    project = _project("gc", target, project)
    collected = collect_garbage(project, delete=yes, older_than=older_than * 60, discard_results=discard_results)
    shared = collect_shared(project, delete=yes, preload_images=preload_images)
    data = {"project": project, "deleted": yes, "partial": [c.to_dict() for c in collected], "shared": shared.to_dict()}

    def text() -> str:
        lines = [
            f"{'deleted' if yes else 'unused'} preload image {i.name} ({i.image}, {i.disk_gb} GB)"
            for i in shared.images
        ]
        lines += [f"kept preload image {i.name}: node pool {', '.join(i.used_by)} boots from it" for i in shared.in_use]
        lines += [f"{'deleted' if yes else 'leftover'} preload builder {b.kind} {b.name}" for b in shared.builders]
        if not collected and not lines:
            return f"nothing to collect in project {project}"
        for c in collected:
            lines.append(f"{c.deployment.name}: " + ", ".join(f"{r.key} {r.name}" for r in c.deployment.resources))
            if c.report is not None:
                lines.append(f"  deleted: {', '.join(c.report.keys('deleted')) or 'nothing'}")
            if c.left:
                lines.append(f"  LEFT (delete by hand): {', '.join(r.name for r in c.left)}")
        if not yes and (collected or shared.images or shared.builders):
            lines.append("nothing deleted; run again with --yes to delete these")
        return "\n".join(lines)

    emit(data, as_json, text)
    if any(c.left for c in collected):
        from ..errors import TeardownError
        from ._errors import EXIT_CODES

        raise click.exceptions.Exit(dict(EXIT_CODES)[TeardownError])
