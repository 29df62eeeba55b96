"""The drivers of the warm-start nodes (``Cluster.warm_start``, :mod:`rl_lustre.plan.warmstart`).

``warm-import``: the bucket must be there (it is yours: never created); no manifest means
nothing was exported yet, and the step is skipped. Otherwise ImportData copies the export
into the new volume; its files go with the volume (``deleted_with="lustre"``), so a failed
import, rolled back, leaves no volume behind and the bucket untouched.

``warm-export``: after the prefetch, ExportData copies the hub cache to the bucket, one
directory at a time (Managed Lustre runs one transfer per instance at a time); any object
whose path looks like a credential is deleted at once; then the manifest is written. A
failed export deletes the objects it added (those not there before it started) and leaves
the manifest as it was; a rollback of ``up()`` does the same for a finished one and puts
the previous manifest back. At ``down()``, before the volume goes, the teardown exports
again with the converted checkpoints and compile caches (incremental: only new or changed
files travel; :meth:`WarmExportDriver.export_at_down`), after the runs' results; a failure
there is cleaned up and keeps the volume, as a failed export of results does.
"""

from __future__ import annotations

import datetime
import logging
import posixpath
from typing import TYPE_CHECKING, Any, Literal

from .._secrets import secret_path
from ..catalog import WARM_FORMAT
from ..errors import ConfigError, NotFoundError, RLLustreError
from ..nemo_rl.caches import nemo_rl_cache_env
from ..oncluster.prefetch import MARKER_DIR, repo_folder
from ..plan.warmstart import WarmStart, warm_paths, warm_start
from ..plankeys import LUSTRE_KEY, WARM_EXPORT_KEY, WARM_IMPORT_KEY
from .context import Context
from .step import Done, Step

if TYPE_CHECKING:
    from ..gcp.storage import BucketObjects
    from ..spec import ClusterSpec

__all__ = ["WarmExportDriver", "WarmImportDriver", "imported_models", "warmstart_drivers"]

log = logging.getLogger("rl_lustre.provision")
_NOT_FOUND = 5


def _warm(ctx: Context) -> WarmStart:
    warm = warm_start(ctx.cluster)
    assert warm is not None
    return warm


def _instance(ctx: Context) -> str:
    assert ctx.cluster.volume is not None
    return ctx.cluster.volume.resource_name()


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def read_manifest(storage: BucketObjects, warm: WarmStart) -> dict[str, Any] | None:
    """The manifest of the export at ``warm``, or None when nothing was exported there.

    Raises:
        ConfigError: the object is there but is not a manifest rl_lustre wrote.
    """
    found = storage.read_json(warm.bucket, warm.manifest)
    if found is None:
        return None
    if not isinstance(found, dict) or found.get("format") != WARM_FORMAT or not isinstance(found.get("objects"), list):
        raise ConfigError(
            "Cluster",
            "warm_start",
            warm.uri,
            f"gs://{warm.bucket}/{warm.manifest} is not an rl_lustre manifest ({WARM_FORMAT}); "
            "point warm_start at a prefix of its own",
        )
    return found


def imported_models(cluster: ClusterSpec, imported: dict[str, Any] | None) -> list[str]:
    """The prefetched models a finished import brought whole: the export's manifest names
    the model (exported after its prefetch finished) and lists its prefetch marker and a
    snapshot of it in the hub cache, and the import failed no object. The prefetch Job
    would find exactly these cached (``rl_lustre.oncluster.prefetch``); none when
    nothing was imported.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="d", project="my-project", region="us-east1", zone="us-east1-b")
        >>> hub = "huggingface_cache/hub/models--Qwen--Qwen2.5-0.5B"
        >>> manifest = {"models": ["Qwen/Qwen2.5-0.5B"], "objects": [
        ...     {"path": f"{hub}/snapshots/abc/config.json", "bytes": 700},
        ...     {"path": "huggingface_cache/rl_lustre_prefetch/models--Qwen--Qwen2.5-0.5B.json", "bytes": 90}]}
        >>> imported_models(c, {"manifest": manifest, "failed": 0})
        ['Qwen/Qwen2.5-0.5B']
        >>> imported_models(c, {"manifest": manifest, "failed": 1}), imported_models(c, {"manifest": None})
        ([], [])
    """
    manifest = (imported or {}).get("manifest")
    if not manifest or (imported or {}).get("failed"):
        return []
    hf = posixpath.relpath(nemo_rl_cache_env(cluster.mount_path)["HF_HOME"], cluster.mount_path)
    paths = [str(o.get("path", "")) for o in manifest.get("objects") or []]
    brought = []
    for model in manifest.get("models") or []:
        folder = repo_folder(model)
        marker = posixpath.join(hf, MARKER_DIR, f"{folder}.json")
        snapshots = posixpath.join(hf, "hub", folder, "snapshots") + "/"
        if marker in paths and any(p.startswith(snapshots) for p in paths):
            brought.append(model)
    return brought


class WarmImportDriver:
    """Imports a previous deployment's export into the new volume."""

    deleted_with: str | None = LUSTRE_KEY
    interruptible = True

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def ensure(self, step: Step) -> Done:
        warm, storage = _warm(self.ctx), self.ctx.apis.storage
        try:
            storage.check_bucket(warm.bucket)
        except NotFoundError as exc:
            raise NotFoundError(
                f"Cluster.warm_start={warm.uri!r}: bucket gs://{warm.bucket} does not exist or "
                f"cannot be read ({exc}); create it in region {self.ctx.region} (rl_lustre never "
                "creates or deletes it)"
            ) from exc
        manifest = read_manifest(storage, warm)
        if manifest is None:
            return Done(
                "skipped",
                {"manifest": None},
                note=f"nothing exported to {warm.uri} yet: this deployment downloads, then exports",
            )
        step.requesting()
        result = self.ctx.apis.lustre.import_data(_instance(self.ctx), warm.data_uri, "/")
        total = int(manifest.get("total_bytes") or 0)
        return Done(
            "created",
            {"manifest": manifest, "copied": result.bytes_copied, "failed": result.objects_failed},
            note=f"imported {result.objects_copied} object(s), {_gb(result.bytes_copied)} of the "
            f"{_gb(total)} exported on {manifest.get('exported_at', '?')}",
        )

    def delete(self, step: Step) -> Literal["deleted", "absent", "skipped", "kept"]:
        # Only when the volume stays (it never does: warm_start needs one this deployment creates).
        step.record.note = "the imported files stay on the volume"
        return "skipped"


class WarmExportDriver:
    """Exports the volume's caches to the bucket, and writes the manifest."""

    deleted_with: str | None = None
    # A transfer runs to its end: the objects it writes are known (and cleaned) only then.
    interruptible = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        # What this run changed, for its rollback: the bucket's objects and manifest before.
        self._before: tuple[dict[str, str], dict[str, Any] | None] | None = None

    def _snapshot(self) -> dict[str, str]:
        warm = _warm(self.ctx)
        return {o.name: o.generation for o in self.ctx.apis.storage.list(warm.bucket, warm.data_prefix)}

    def _undo(self, snapshot: dict[str, str]) -> list[str]:
        """Delete the objects under the export's prefix that were not there in ``snapshot``."""
        warm, storage = _warm(self.ctx), self.ctx.apis.storage
        added = [o.name for o in storage.list(warm.bucket, warm.data_prefix) if o.name not in snapshot]
        for name in added:
            storage.delete(warm.bucket, name)
        return added

    def _export(
        self, paths: list[str], models: list[str], before: dict[str, Any] | None, *, missing_ok: bool
    ) -> dict[str, Any]:
        warm, storage, lustre = _warm(self.ctx), self.ctx.apis.storage, self.ctx.apis.lustre
        instance = _instance(self.ctx)
        exported = []
        for path in paths:
            try:
                lustre.export_data(instance, f"/{path}", f"gs://{warm.bucket}/{warm.object_for(path)}")
            except RLLustreError as exc:
                if not (missing_ok and getattr(exc, "grpc_code", None) == _NOT_FOUND):
                    raise
                log.info("warm start: %s is not on the volume; nothing to export there", path)
                continue
            exported.append(path)
        objects: list[dict[str, Any]] = []
        removed: list[str] = []
        for obj in storage.list(warm.bucket, warm.data_prefix):
            path = warm.path_of(obj.name)
            why = secret_path(path)
            if why is not None:
                storage.delete(warm.bucket, obj.name)
                removed.append(path)
                log.warning("warm start: deleted gs://%s/%s from the export: %s", warm.bucket, obj.name, why)
                continue
            objects.append({"path": path, "bytes": obj.size})
        manifest = {
            "format": WARM_FORMAT,
            "exported_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "deployment": self.ctx.deployment,
            "volume": instance,
            "paths": sorted(set(exported) | set((before or {}).get("paths") or [])),
            "models": sorted(set(models) | set((before or {}).get("models") or [])),
            "objects": objects,
            "total_bytes": sum(int(o["bytes"]) for o in objects),
            "secrets_removed": removed,
        }
        storage.write_json(warm.bucket, warm.manifest, manifest)
        return manifest

    def ensure(self, step: Step) -> Done:
        warm = _warm(self.ctx)
        imported = step.dep(WARM_IMPORT_KEY) or {}
        before = imported.get("manifest")
        models = list(self.ctx.cluster.prefetch_models)
        if before is not None and set(models) <= set(before.get("models") or []):
            return Done(
                "skipped",
                before,
                note="the import brought every prefetched model: nothing new to export (down() exports the caches)",
            )
        snapshot = self._snapshot()
        self._before = (snapshot, before)
        step.requesting()
        try:
            manifest = self._export(warm_paths(self.ctx.cluster)[0], models, before, missing_ok=False)
        except BaseException:
            self._undo(snapshot)
            raise
        return Done(
            "created",
            manifest,
            note=f"exported {len(manifest['objects'])} object(s), "
            f"{_gb(manifest['total_bytes'])}; manifest gs://{warm.bucket}/{warm.manifest}",
        )

    def delete(self, step: Step) -> Literal["deleted", "absent", "skipped", "kept"]:
        warm, storage = _warm(self.ctx), self.ctx.apis.storage
        if step.operation == "rollback":
            if self._before is None:
                return "absent"
            snapshot, before = self._before
            added = self._undo(snapshot)
            if before is None:
                storage.delete(warm.bucket, warm.manifest)
            else:
                storage.write_json(warm.bucket, warm.manifest, before)
            step.record.note = f"removed the {len(added)} object(s) this up() exported; manifest as before"
            return "deleted"
        # down(): the teardown runs export_at_down() among its exports, before the volume goes.
        step.record.note = "exported by the teardown before the volume is deleted"
        return "skipped"

    def export_at_down(self) -> dict[str, Any] | None:
        """Export once more, with what the jobs made (converted checkpoints, compile caches),
        before the volume goes; incremental. None when the volume is not there.

        Raises:
            RLLustreError: the export failed; the objects it added were removed again and the
                manifest is as it was (the teardown then keeps the volume).
        """
        warm, storage = _warm(self.ctx), self.ctx.apis.storage
        if self.ctx.apis.lustre.get_or_none(_instance(self.ctx)) is None:
            return None
        before = read_manifest(storage, warm)
        snapshot = self._snapshot()
        try:
            manifest = self._export(warm_paths(self.ctx.cluster)[1], [], before, missing_ok=True)
        except Exception:
            added = self._undo(snapshot)
            log.warning("warm start: the export at down() failed; removed the %d object(s) it added", len(added))
            raise
        log.info(
            "warm start: exported %d object(s), %s, to %s (kept: the next deployment imports them)",
            len(manifest["objects"]),
            _gb(manifest["total_bytes"]),
            warm.uri,
        )
        return manifest


def warmstart_drivers(ctx: Context) -> dict[str, Any]:
    """The drivers of the warm-start nodes of ``ctx.plan`` (none without a warm start)."""

    if WARM_IMPORT_KEY not in ctx.plan:
        return {}
    return {WARM_IMPORT_KEY: WarmImportDriver(ctx), WARM_EXPORT_KEY: WarmExportDriver(ctx)}
