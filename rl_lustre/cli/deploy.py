"""``plan``, ``up`` and ``down``: a deployment's lifecycle, from its ``Cluster`` spec."""

from __future__ import annotations

from typing import Any

import click

from ._common import emit, json_option, load, target_argument


def _report(cluster: Any) -> Any:
    return getattr(cluster._backend(), "last_report", None)


prices_option = click.option(
    "--prices",
    "prices_file",
    type=click.Path(dir_okay=False),
    help="A JSON file of your rates and discounts (rl_lustre.Prices fields) to price with.",
)


def load_prices(prices_file: str | None) -> Any:
    """The ``Prices`` of ``--prices``, or None for the list prices."""
    if prices_file is None:
        return None
    from ..prices import Prices

    return Prices.from_file(prices_file)


@click.command()
@target_argument
@json_option
@prices_option
def plan(target: str, as_json: bool, prices_file: str | None) -> None:
    """Show every resource `up` would create for TARGET, and what it costs per hour.

    Makes no remote call.
    """
    cluster = load(target)
    prices = load_prices(prices_file)
    the_plan = cluster.plan()
    data = the_plan.to_dict()
    if prices is None:
        emit(data, as_json, lambda: str(the_plan))
        return
    cost = the_plan.cost(prices)
    data["cost"] = cost.to_dict()
    emit(data, as_json, lambda: f"{the_plan}\n\nWith the prices of {prices_file}:\n{cost}")


@click.command()
@target_argument
@json_option
@click.option(
    "--keep-on-failure",
    is_flag=True,
    help="If a step fails, leave what was created in place (to debug it); `down` removes it later.",
)
def up(target: str, as_json: bool, keep_on_failure: bool) -> None:
    """Create TARGET's deployment (or adopt the one running) and wait until it takes jobs.

    On GKE, a failure or Ctrl-C deletes again what this command created. The
    deployment then runs until `rl-lustre down`; a local one keeps its Ray head
    running after this command ends.
    """
    import attrs

    cluster = load(target)
    if cluster.backend == "local" and not cluster.keep:
        # The head outlives this process, as a GKE deployment does; `down TARGET` stops it.
        cluster = attrs.evolve(cluster, keep=True)
    if not as_json:
        from .._output import enable_output

        enable_output()
    cluster.up(keep_on_failure=keep_on_failure)
    backend = cluster._backend()
    report = _report(cluster)
    data = {
        "cluster": cluster.name,
        "backend": cluster.backend,
        "up": True,
        "describe": backend.describe(),
        "report": None if report is None else report.to_dict(),
    }
    emit(
        data,
        as_json,
        lambda: "\n".join(
            [
                *([str(report)] if report is not None else []),
                f"{backend.describe()} is up.",
                f"Tear it down with: rl-lustre down {target}",
            ]
        ),
    )


@click.command()
@click.argument("target", metavar="TARGET|NAME")
@json_option
@click.option("--project", help="With NAME: the project of the deployment, found by its labels.")
@click.option("--zone", help="With NAME: its zone (checked against what is found).")
@click.option(
    "--delete-preload-image",
    is_flag=True,
    help="Delete the preload disk image too (kept by default for the next deployment of the image; "
    "kept anyway while a node pool boots from it).",
)
@click.option(
    "--results",
    metavar="gs://BUCKET/PREFIX",
    default=None,
    help="Export the runs' results there first (as Cluster.results; with TARGET, in place of the script's).",
)
@click.option(
    "--discard-results",
    is_flag=True,
    help="Delete the volume even though its runs' results were not exported (they are lost).",
)
def down(
    target: str,
    as_json: bool,
    project: str | None,
    zone: str | None,
    delete_preload_image: bool,
    results: str | None,
    discard_results: bool,
) -> None:
    """Delete what `up` created for TARGET, exporting the runs' results first; what you
    own is never deleted.

    `down NAME --project P [--zone Z]` finds the deployment NAME by its labels, without
    the script, and deletes it the same way. The preload disk image, shared by the
    deployments of its image, is kept unless --delete-preload-image. A volume whose runs'
    results were not exported (no destination, or the export failed) is KEPT, with a
    message saying what is on it: give --results (or results= in the script) and run
    `down` again, or --discard-results.
    """
    import attrs

    from ..errors import ConfigError

    if ":" in target:
        if project is not None or zone is not None:
            raise ConfigError(
                "rl-lustre down",
                "--project",
                project or zone,
                "is for `down NAME` (found by its labels), not for a TARGET file",
            )
        cluster = load(target)
        if results is not None:
            cluster = attrs.evolve(cluster, results=results)
        if not as_json:
            from .._output import enable_output

            enable_output()
        cluster.down(delete_preload_image=delete_preload_image, discard_results=discard_results)
        report = _report(cluster)
        kept = getattr(cluster._backend(), "last_kept", None)
    else:
        if project is None:
            raise ConfigError(
                "rl-lustre down",
                "--project",
                None,
                f"is required with a deployment NAME ({target!r}); or give a TARGET path/to/script.py:name",
            )
        from ..inventory import find_deployment

        deployment = find_deployment(target, project=project, zone=zone)
        if results is not None:
            from ..spec.cluster_storage import is_warm_start

            if not is_warm_start(results):
                raise ConfigError(
                    "rl-lustre down", "--results", results, "must be 'gs://BUCKET' or 'gs://BUCKET/PREFIX'"
                )
        if not as_json:
            from .._output import enable_output

            enable_output()
        report, kept = _down_found(deployment, delete_preload_image, results, discard_results)
    data = {"target": target, "down": True, "kept": kept, "report": None if report is None else report.to_dict()}
    done = f"{target}: torn down, but its volume is KEPT (see above)." if kept else f"{target}: torn down."
    emit(data, as_json, lambda: "\n".join([*([str(report)] if report is not None else []), done]))


def _down_found(deployment: Any, delete_preload_image: bool, results: str | None, discard: bool) -> tuple[Any, Any]:
    """``down NAME``: the deployment found by its labels, through a backend of its own."""
    import warnings

    from ..errors import ResultsKeptWarning

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResultsKeptWarning)
        report = deployment.down(delete_preload_image=delete_preload_image, results=results, discard_results=discard)
    kept = [str(w.message) for w in seen if issubclass(w.category, ResultsKeptWarning)]
    return report, (kept[0] if kept else None)
