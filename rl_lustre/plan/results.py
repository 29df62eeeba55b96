"""Where a run's results go (``Cluster.results``), and how they are laid out there.

``results="gs://BUCKET/PREFIX"`` (a directory, or ``file://``, on a local cluster): before
``down()`` deletes the volume it created, teardown stops the runs and exports each one
to ``<results>/<run id>/``::

    <run id>/submission.json journal.jsonl driver.log stopped diagnostics/   the run's records
    <run id>/summary.json        status, attempts, goodput ledger (written at teardown)
    <run id>/export.json         what was exported and what was withheld, and why
    <run id>/checkpoints/step_N/ every complete checkpoint (never a tmp_step_N)
    <run id>/logs/               NeMo-RL's log directory
    <run id>/rl-lustre-results.json   the manifest, written once the export is verified

Checkpoints mirror ``keep_top_k``: a checkpoint an earlier export copied and ``keep_top_k``
has since deleted on the volume is deleted from the results too, once the checkpoints that
replaced it are exported and verified, so the bucket holds what the volume held and costs
``keep_top_k`` checkpoints per run (see docs/operations.md). The plan shows it as the node
``results-export`` with its monthly storage cost per run.

Examples:
    >>> r = ResultsLocation("gs://my-bucket/rl")
    >>> r.bucket, r.prefix, r.run_uri("rl-lustre-run-1-0a1b2c3d")
    ('my-bucket', 'rl/', 'gs://my-bucket/rl/rl-lustre-run-1-0a1b2c3d')
    >>> ResultsLocation("file:///data/rl/").run_uri("r1")
    '/data/rl/r1'
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from .._sizing import checkpoint_bytes, parse_param_count
from ..catalog import REFERENCE_MODEL, RESULTS_FORMAT, RESULTS_MANIFEST
from ..oncluster.seal import CHECKPOINTS, LOGS
from ..plankeys import RESULTS_EXPORT_KEY
from .graph import PlannedResource

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["ResultsLocation", "estimated_gb_per_run", "results_location", "results_nodes"]


class ResultsLocation:
    """A results location: ``gs://BUCKET[/PREFIX]`` (``kind == "gs"``) or a directory
    (``kind == "dir"``: a path or a ``file://`` URI), split.

    Examples:
        >>> ResultsLocation("gs://b-1").prefix, ResultsLocation("gs://b-1/a/b/").prefix
        ('', 'a/b/')
    """

    def __init__(self, uri: str) -> None:
        from ..spec.cluster_storage import results_path

        if uri.startswith("gs://"):
            self.kind = "gs"
            bucket, _, prefix = uri.removeprefix("gs://").partition("/")
            prefix = prefix.strip("/")
            self.bucket = bucket
            self.prefix = f"{prefix}/" if prefix else ""
            self.path = ""
            self.uri = f"gs://{bucket}" + (f"/{prefix}" if prefix else "")
        else:
            self.kind = "dir"
            self.bucket, self.prefix = "", ""
            self.path = results_path(uri)
            self.uri = self.path

    def __repr__(self) -> str:
        return f"ResultsLocation({self.uri!r})"

    def run_uri(self, run_id: str) -> str:
        """Where run ``run_id``'s results live."""
        return posixpath.join(self.uri, run_id)

    def run_prefix(self, run_id: str) -> str:
        """The object prefix (gs) or directory (dir) of run ``run_id``, ending with ``/``."""
        return f"{self.prefix}{run_id}/" if self.kind == "gs" else posixpath.join(self.path, run_id) + "/"


def results_location(cluster: ClusterSpec) -> ResultsLocation | None:
    """The cluster's results location, or None without one."""
    return ResultsLocation(cluster.results) if cluster.results else None


def _basis(cluster: ClusterSpec) -> tuple[str, int]:
    """The model a run's results are estimated for (the first prefetched one that states its
    size, else the default job's) and the checkpoints kept (the default ``keep_top_k``)."""
    import attrs

    from ..spec.job import JobSpec

    model = next((m for m in cluster.prefetch_models if parse_param_count(m)), REFERENCE_MODEL)
    kept = attrs.fields(JobSpec).keep_top_k.default or 2
    return model, int(kept)


def estimated_gb_per_run(cluster: ClusterSpec) -> float:
    """GB a run's results hold, estimated: ``keep_top_k`` checkpoints (weights and optimizer
    state) of the model (see :func:`_basis`); records and logs are small beside them.

    Examples:
        >>> from rl_lustre import Cluster
        >>> estimated_gb_per_run(Cluster(name="d", project="my-project", region="us-east1", zone="us-east1-b"))
        2304.0
    """
    model, kept = _basis(cluster)
    return round(kept * checkpoint_bytes(parse_param_count(model) or 0) / 1e9, 1)


def hf_copy_gb(cluster: ClusterSpec) -> float:
    """GB of one checkpoint converted to Hugging Face format (``run.export_model(format="hf")``),
    at the converters' larger size (4 B per parameter).

    Examples:
        >>> from rl_lustre import Cluster
        >>> hf_copy_gb(Cluster(name="d", project="my-project", region="us-east1", zone="us-east1-b"))
        288.0
    """
    from ..nemo_rl.converters import HF_BYTES_PER_PARAM

    model, _ = _basis(cluster)
    return round((parse_param_count(model) or 0) * max(HF_BYTES_PER_PARAM.values()) / 1e9, 1)


def results_nodes(cluster: ClusterSpec) -> list[PlannedResource]:
    """The ``results-export`` node (none without ``results``)."""
    where = results_location(cluster)
    if where is None:
        return []
    model, kept = _basis(cluster)
    gke = cluster.backend == "gke"
    settings: dict[str, Any] = {
        "destination": f"{where.uri}/<run id>/",
        "layout": {
            "records": "submission.json, journal.jsonl, driver.log, stopped, diagnostics/, summary.json, export.json",
            "checkpoints": f"{CHECKPOINTS}/step_N/ (complete checkpoints only, never a tmp_step_N)",
            "logs": f"{LOGS}/ (NeMo-RL's logger.log_dir)",
            "manifest": f"{RESULTS_MANIFEST} ({RESULTS_FORMAT}), written once the export is verified",
        },
        "when": "down() and the end of a with block (also on an exception or Ctrl-C): the runs are stopped, "
        "then exported one after another, each transfer verified, "
        + ("then the volume is deleted" if gke else "then the Ray head is stopped (the directory stays)"),
        "incremental": "what is already there is not copied again",
        "checkpoints_kept": "mirror keep_top_k: a checkpoint deleted on the volume after an earlier export is "
        "deleted from the results once its successors are exported",
        "never": "credentials: files named or placed like one, or holding a secret's value, are withheld (named "
        "in export.json)",
        "estimated_gb_per_run": estimated_gb_per_run(cluster),
        "estimated_for": f"{kept} checkpoints of {model}",
        "hf_copy_gb": hf_copy_gb(cluster),
        "hf_copy": "run.export_model(dest, format='hf'): one converted copy per model exported, on the volume "
        "and in dest (NeMo-RL's converter writes fp32 from a DTensor checkpoint, bf16 from a Megatron one)",
    }
    if gke:
        settings["bucket"] = (
            f"{where.bucket}: yours, never created or deleted; Managed Lustre's service agent needs "
            "roles/storage.objectUser on it (check() verifies)"
        )
        settings["on_failure"] = (
            "no destination, or an export that fails or is interrupted: the volume is KEPT (everything else is "
            "deleted) until down() exports it, or down(discard_results=True)"
        )
    return [
        PlannedResource(
            key=RESULTS_EXPORT_KEY,
            kind="lustre.v1.ExportData" if gke else "local.Copy",
            name=where.uri,
            action="use",
            settings=settings,
        )
    ]
