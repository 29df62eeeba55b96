"""Collecting what a crash left: the partial deployments of a project (labelled resources
without their GKE cluster), deleted through their plan's executor as ``Cluster.down()``
deletes, so each resource goes in order and only if it carries the deployment's labels.

A volume ``down()`` kept because its runs' results were exported nowhere ("kept: results
not exported") is never collected without ``discard_results``.

Example::

    for c in collect_garbage("my-project", delete=True):
        print(c.deployment.name, c.report.keys("deleted"), c.left)
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import attrs

from .inventory import KEYS, Deployment, FoundResource, find_deployments
from .plankeys import PSA_PEERING_KEY, PSA_RANGE_KEY

if TYPE_CHECKING:
    from .provision.context import Apis
    from .provision.records import Report

__all__ = ["Collected", "collect_garbage"]

logger = logging.getLogger("rl_lustre.inventory")


@attrs.frozen
class Collected:
    """A partial deployment :func:`collect_garbage` found, and what became of it.

    Attributes:
        deployment: what was found.
        report: the executor's report of its deletion; None when nothing was deleted.
        left: what still carries its labels after the deletion (a resource whose name is
            not the one its plan gives it); empty without deletion.
    """

    deployment: Deployment
    report: Report | None = None
    left: tuple[FoundResource, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As JSON data."""
        return {
            **self.deployment.to_dict(),
            "report": None if self.report is None else self.report.to_dict(),
            "left": [r.to_dict() for r in self.left],
        }


def collect_garbage(
    project: str,
    *,
    delete: bool = False,
    older_than: float = 900.0,
    apis: Apis | None = None,
    discard_results: bool = False,
) -> list[Collected]:
    """The partial deployments of ``project`` (labelled resources without their GKE cluster),
    and, with ``delete``, their deletion through the executor.

    Only deployments older than ``older_than`` seconds count, so that one whose
    ``up()`` is under way right now (its cluster not requested yet) is left alone. A
    volume ``down()`` kept for results not exported is never collected without
    ``discard_results`` (the same explicit word as ``down(discard_results=True)``).

    Example::

        for c in collect_garbage("my-project", delete=True):
            print(c.deployment.name, c.report.keys("deleted"), c.left)

    Raises:
        TeardownError: a resource could not be deleted (the others were).
    """
    now = time.time()
    out: list[Collected] = []
    for d in find_deployments(project, apis=apis):
        if d.whole:
            continue
        age = d.age_seconds(now)
        if age is not None and age < older_than:
            logger.info("deployment %r is partial but only %.0fs old; it may be coming up: left alone", d.name, age)
            continue
        if d.kept_for_results and not discard_results:
            logger.info("deployment %r: its volume was kept for results not exported; left alone", d.name)
            continue
        if not delete:
            out.append(Collected(d))
            continue
        keys = [k for k in d.plan_keys() if k in KEYS]
        if PSA_RANGE_KEY in keys:
            keys.append(PSA_PEERING_KEY)
        logger.info("collecting the partial deployment %r: %s", d.name, ", ".join(keys))
        report = d.down(keys=keys, apis=apis)
        after = [x for x in find_deployments(project, apis=apis) if x.name == d.name]
        left = after[0].resources if after else ()
        for r in left:
            logger.warning(
                "%s %s still carries the labels of %r (not the name its plan gives it): delete it by hand",
                r.kind,
                r.name,
                d.name,
            )
        out.append(Collected(d, report, left))
    return out
