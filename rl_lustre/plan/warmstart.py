"""Warm starts from Cloud Storage (``Cluster.warm_start``): two plan nodes.

A deployment's Lustre volume is new and empty; without a warm start its first job waits
for the Hugging Face download (the model prefetch) and NeMo-RL's HF → Megatron
conversion. With ``Cluster(warm_start="gs://BUCKET/PREFIX")`` what those produce is kept
in your bucket between deployments::

    lustre ─ warm-import ─ model-prefetch ─ warm-export

- ``warm-import`` (``lustre.v1.ImportData``): when the bucket holds a manifest (a previous
  deployment exported), Managed Lustre copies ``gs://BUCKET/PREFIX/volume/`` into the
  volume at the paths the files were exported from. A model it brought whole (its prefetch
  marker and snapshot) needs no prefetch: when that is every model, no prefetch Job runs;
  otherwise the Job skips those. NeMo-RL finds the converted checkpoint. No manifest
  (the first deployment): nothing to import.
- ``warm-export`` (``lustre.v1.ExportData``): once the prefetch is done, the Hugging Face
  hub cache goes to the bucket (unless the import brought every model already); at
  ``down()``, before the volume is deleted, the converted checkpoints and compile caches
  too. Only the directories listed here are exported, never ``$HF_HOME`` itself (it holds
  huggingface_hub's ``token``); any object whose path looks like a credential
  (``rl_lustre._secrets.secret_path``) is deleted from the bucket at once. The manifest
  ``gs://BUCKET/PREFIX/rl-lustre-manifest.json`` lists every object with its size.

The bucket is yours: rl_lustre never creates or deletes it, only the objects it wrote.

Examples:
    >>> from rl_lustre import Cluster
    >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
    ...             warm_start="gs://my-bucket/qwen72b")
    >>> plan = c.plan()
    >>> [(k, plan.get(k).depends_on) for k in ("warm-import", "model-prefetch", "warm-export")]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('warm-import', ('lustre',)), ('model-prefetch', ('pvc', 'cpu-pool', 'secret', 'warm-import')),
     ('warm-export', ('model-prefetch', 'warm-import'))]
    >>> list(plan.get("warm-export").settings["at_up"])
    ['huggingface_cache/hub', 'huggingface_cache/rl_lustre_prefetch']
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from .._sizing import parse_param_count
from ..catalog import WARM_DATA_DIR, WARM_FORMAT, WARM_MANIFEST
from ..nemo_rl.caches import CACHE_DIR, nemo_rl_cache_env
from ..oncluster.prefetch import MARKER_DIR
from ..plankeys import LUSTRE_KEY, MODEL_PREFETCH_KEY, WARM_EXPORT_KEY, WARM_IMPORT_KEY
from .graph import PlannedResource

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["WarmStart", "import_keys", "warm_paths", "warm_start", "warmstart_nodes"]

# bf16 weights (2 bytes a parameter) in the hub cache, and as many again converted.
_BYTES_PER_PARAM = 2


class WarmStart:
    """Where a warm start lives: ``gs://BUCKET/PREFIX``, split.

    Examples:
        >>> w = WarmStart("gs://my-bucket/qwen72b")
        >>> w.bucket, w.data_prefix, w.manifest, w.data_uri
        ('my-bucket', 'qwen72b/volume/', 'qwen72b/rl-lustre-manifest.json', 'gs://my-bucket/qwen72b/volume/')
        >>> WarmStart("gs://my-bucket").manifest
        'rl-lustre-manifest.json'
    """

    def __init__(self, uri: str) -> None:
        rest = uri.removeprefix("gs://")
        self.uri = uri
        self.bucket, _, prefix = rest.partition("/")
        self.prefix = f"{prefix}/" if prefix else ""
        self.data_prefix = f"{self.prefix}{WARM_DATA_DIR}/"
        self.manifest = f"{self.prefix}{WARM_MANIFEST}"
        self.data_uri = f"gs://{self.bucket}/{self.data_prefix}"

    def object_for(self, path: str) -> str:
        """The object a volume file at ``path`` (relative to the volume's root) is exported to."""
        return self.data_prefix + path.strip("/")

    def path_of(self, name: str) -> str:
        """The volume path (relative) of an exported object."""
        return name.removeprefix(self.data_prefix)


def warm_start(cluster: ClusterSpec) -> WarmStart | None:
    """The cluster's warm start, or None without one."""
    return WarmStart(cluster.warm_start) if cluster.warm_start else None


def _relative(cluster: ClusterSpec, path: str) -> str:
    return posixpath.relpath(path, cluster.mount_path)


def warm_paths(cluster: ClusterSpec) -> tuple[list[str], list[str]]:
    """The volume's directories (relative to its root) exported after the prefetch, and
    those exported again at ``down()``.

    Examples:
        >>> from rl_lustre import Cluster
        >>> up, down = warm_paths(Cluster(name="d", project="my-project", region="us-east1", zone="us-east1-b"))
        >>> down[len(up):]
        ['huggingface_cache/datasets', 'huggingface_cache/nemo_rl', 'cache']
    """
    env = nemo_rl_cache_env(cluster.mount_path)
    hf = _relative(cluster, env["HF_HOME"])
    at_up = [posixpath.join(hf, "hub"), posixpath.join(hf, MARKER_DIR)]
    at_down = [
        *at_up,
        _relative(cluster, env["HF_DATASETS_CACHE"]),
        _relative(cluster, env["NRL_MEGATRON_CHECKPOINT_DIR"]),
        CACHE_DIR,
    ]
    return at_up, at_down


def estimated_gb(cluster: ClusterSpec) -> float:
    """What the export holds, estimated: each prefetched model's weights and their
    conversion (bf16), from the parameter count its name states (0 when none does)."""
    params = sum(parse_param_count(m) or 0 for m in cluster.prefetch_models)
    return round(params * _BYTES_PER_PARAM * 2 / 1e9, 1)


def import_keys(cluster: ClusterSpec) -> tuple[str, ...]:
    """``("warm-import",)`` with a warm start: the prefetch waits for it."""
    return (WARM_IMPORT_KEY,) if cluster.warm_start else ()


def warmstart_nodes(cluster: ClusterSpec, *, prefetch: bool) -> list[PlannedResource]:
    """The ``warm-import`` and ``warm-export`` nodes (none without ``warm_start``)."""
    warm = warm_start(cluster)
    if warm is None:
        return []
    at_up, at_down = warm_paths(cluster)
    common: dict[str, Any] = {
        "bucket": f"{warm.bucket}: yours, read and written, never created or deleted",
        "manifest": f"gs://{warm.bucket}/{warm.manifest} ({WARM_FORMAT}: every exported object with its size)",
        "volume": cluster.volume.resource_name() if cluster.volume is not None else None,
    }
    hf = nemo_rl_cache_env(cluster.mount_path)
    return [
        PlannedResource(
            key=WARM_IMPORT_KEY,
            kind="lustre.v1.ImportData",
            name=warm.data_uri,
            depends_on=(LUSTRE_KEY,),
            settings={
                **common,
                "source": warm.data_uri,
                "into": "/ (the volume's root: each file at the path it was exported from)",
                "when": "the manifest exists (a previous deployment exported); otherwise nothing to import",
                "replaces": [
                    f"the Hugging Face download of {', '.join(cluster.prefetch_models) or 'the models'} "
                    f"(into {hf['HF_HOME']}: with every model brought whole, no prefetch Job runs)",
                    f"the HF -> Megatron conversion (NeMo-RL finds {hf['NRL_MEGATRON_CHECKPOINT_DIR']}"
                    "/<model>/iter_0000000)",
                ],
                "on_failure": "up() fails and rolls back: the volume, created by this up(), goes with what was "
                "imported; the bucket is not touched",
            },
        ),
        PlannedResource(
            key=WARM_EXPORT_KEY,
            kind="lustre.v1.ExportData",
            name=warm.data_uri,
            depends_on=((MODEL_PREFETCH_KEY,) if prefetch else ()) + (WARM_IMPORT_KEY,),
            settings={
                **common,
                "destination": warm.data_uri,
                "at_up": at_up,
                "at_up_when": "once the prefetch is done, unless the import brought every prefetched model",
                "at_down": at_down,
                "never": "$HF_HOME itself (huggingface_hub's token), or any object whose path looks like a "
                "credential (deleted from the bucket at once, and named in the log)",
                "on_failure": "the objects this export added (those the manifest does not list) are deleted; the "
                "manifest is written only after a complete export. A rollback of up() removes what "
                "its export added and puts the previous manifest back",
                "estimated_gb": estimated_gb(cluster),
                "kept": "after down(): the next deployment with this warm_start imports it; delete the prefix "
                "yourself (gcloud storage rm -r) to drop it",
            },
        ),
    ]
