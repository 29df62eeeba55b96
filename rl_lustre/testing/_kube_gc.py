"""The garbage collector and the deletion of :class:`~rl_lustre.testing.kube.KubeFake`.

An object whose owners are all gone is deleted (background propagation); an object
being deleted goes once :attr:`KubeTimings.deletion` has passed and its finalizers are
done: ``foregroundDeletion`` when its dependents are gone, ``pvc-protection`` when no
pod mounts the claim, ``pv-protection`` when no claim is bound to the volume.
"""

from __future__ import annotations

import time

from ._kube_controller import Controller, Memory
from ._kube_faults import KubeFaults, KubeTimings
from ._kube_spot import SpotCapacity
from ._kube_store import Obj, Store, owned_by


class GarbageCollector(Controller):
    """Owner references and finalizers; a pod that goes gives its Spot node back to ``spot``."""

    def __init__(
        self, store: Store, faults: KubeFaults, timings: KubeTimings, memory: Memory, spot: SpotCapacity
    ) -> None:
        super().__init__(store, faults, timings, memory)
        self.spot = spot

    def step(self) -> None:
        self._collect_garbage()

    def _collect_garbage(self) -> None:
        live_uids = {o["metadata"]["uid"] for o in self.store.find()}
        for obj in self.store.find():
            meta = obj["metadata"]
            refs = meta.get("ownerReferences") or []
            if refs and not meta.get("deletionTimestamp") and not any(r.get("uid") in live_uids for r in refs):
                # Owner gone (background propagation): collect the orphan.
                self.store.mark_deleted(obj["kind"], meta.get("namespace"), meta["name"], foreground=False)
        for obj in self.store.find(match=lambda o: bool(o["metadata"].get("deletionTimestamp"))):
            self._finish_deletion(obj)

    def _finish_deletion(self, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        dependents = self.store.find(match=lambda o: owned_by(o, uid))
        for dep in dependents:
            if not dep["metadata"].get("deletionTimestamp"):
                self.store.mark_deleted(
                    dep["kind"], dep["metadata"].get("namespace"), dep["metadata"]["name"], foreground=False
                )
        if self._age_since_deletion(obj) < self.timings.deletion:
            return
        finalizers = list(meta.get("finalizers") or [])
        if "foregroundDeletion" in finalizers and not dependents:
            finalizers.remove("foregroundDeletion")
        if "kubernetes.io/pvc-protection" in finalizers and not self._claim_in_use(obj):
            finalizers.remove("kubernetes.io/pvc-protection")
        if "kubernetes.io/pv-protection" in finalizers and not self._volume_bound(obj):
            finalizers.remove("kubernetes.io/pv-protection")
        if finalizers != list(meta.get("finalizers") or []):

            def set_finalizers(o: Obj) -> None:
                o["metadata"]["finalizers"] = finalizers

            self.store.update(obj["kind"], meta.get("namespace"), meta["name"], set_finalizers)
        if not finalizers:
            if obj["kind"] == "Pod":
                self.spot.release(meta["name"])
            self.store.remove(obj)
            self.memory.born.pop(uid, None)
            self.memory.born.pop(f"deleted:{uid}", None)

    def _age_since_deletion(self, obj: Obj) -> float:
        key = f"deleted:{obj['metadata']['uid']}"
        return time.monotonic() - self.memory.born.setdefault(key, time.monotonic())

    def _claim_in_use(self, pvc: Obj) -> bool:
        name, ns = pvc["metadata"]["name"], pvc["metadata"].get("namespace")
        for pod in self.store.find("Pod", ns):
            for vol in (pod.get("spec") or {}).get("volumes") or []:
                if (vol.get("persistentVolumeClaim") or {}).get("claimName") == name:
                    return True
        return False

    def _volume_bound(self, pv: Obj) -> bool:
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        claim = self.store.get("PersistentVolumeClaim", ref.get("namespace"), ref.get("name", ""))
        return claim is not None and (claim.get("spec") or {}).get("volumeName") == pv["metadata"]["name"]
