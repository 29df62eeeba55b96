"""The GKE side of results (``Cluster.results``, :mod:`rl_lustre.plan.results`): the plan
node's driver, the mover that exports with Managed Lustre's ExportData, and the label a kept
volume carries.

- ``results-export`` (action ``use``): at ``up()`` the bucket must be there (it is yours,
  never created or deleted), so that a wrong name fails before the GPUs come, not at the
  end; ``down()`` leaves the node to the teardown (:mod:`rl_lustre.backends.teardown`).
- The instance's label ``rl-lustre-results``: ``on-volume`` once a job was submitted (so a
  teardown without the cluster still knows results may be on it), ``sealed`` once a
  ``down()`` sealed its runs (a later one exports them without the cluster),
  ``not-exported`` when ``down()`` kept it for them (``rl-lustre ls`` says so; ``gc`` leaves
  it alone).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from ..catalog import LABEL_RESULTS, RESULTS_NOT_EXPORTED
from ..errors import NotFoundError
from ..plan.results import results_location
from ..plankeys import RESULTS_EXPORT_KEY
from .context import Context
from .step import Done, Step

if TYPE_CHECKING:
    from ..gcp.lustre import LustreInstances

__all__ = [
    "RESULTS_ON_VOLUME",
    "RESULTS_SEALED",
    "ResultsBucketDriver",
    "kept_for_results",
    "label_volume",
    "results_drivers",
]

log = logging.getLogger("rl_lustre.provision")
# The label's values: once a job was submitted (results may be on the volume), and once a
# down() sealed its runs (their lists of what to export travel with their records).
RESULTS_ON_VOLUME = "on-volume"
RESULTS_SEALED = "sealed"


class ResultsBucketDriver:
    """``results-export``: the bucket must exist (read-only); the export is the teardown's."""

    deleted_with: str | None = None
    interruptible = True

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def ensure(self, step: Step) -> Done:
        where = results_location(self.ctx.cluster)
        assert where is not None
        try:
            self.ctx.apis.storage.check_bucket(where.bucket)
        except NotFoundError as exc:
            raise NotFoundError(
                f"Cluster.results={where.uri!r}: bucket gs://{where.bucket} does not exist or cannot be read "
                f"({exc}); create it in region {self.ctx.region} (rl_lustre never creates or deletes it)"
            ) from exc
        return Done("used", note=f"runs are exported to {where.uri}/<run id>/ before the volume is deleted")

    def delete(self, step: Step) -> Literal["deleted", "absent", "skipped", "kept"]:
        step.record.note = "exported by the teardown before the volume is deleted"
        return "skipped"


def results_drivers(ctx: Context) -> dict[str, Any]:
    """The driver of the ``results-export`` node (none without ``results``)."""
    return {RESULTS_EXPORT_KEY: ResultsBucketDriver(ctx)} if RESULTS_EXPORT_KEY in ctx.plan else {}


def label_volume(lustre: LustreInstances, instance: str, value: str | None) -> bool:
    """Set (or with None remove) the instance's ``rl-lustre-results`` label; False when the
    instance is not there or already says so."""
    found = lustre.get_or_none(instance)
    if found is None:
        return False
    labels = dict(found.labels)
    if labels.get(LABEL_RESULTS) == value or (value is None and LABEL_RESULTS not in labels):
        return False
    if value is None:
        labels.pop(LABEL_RESULTS, None)
    else:
        labels[LABEL_RESULTS] = value
    lustre.set_labels(instance, labels)
    return True


def kept_for_results(labels: Any) -> bool:
    """Whether an instance's labels say ``down()`` kept it for results not exported."""
    return dict(labels or {}).get(LABEL_RESULTS) == RESULTS_NOT_EXPORTED
