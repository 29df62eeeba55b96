"""The PersistentVolume binder of :class:`~rl_lustre.testing.kube.KubeFake`.

A Pending claim binds to the volume it names (``spec.volumeName``) or that names it
(``claimRef``) once :attr:`KubeTimings.bind` has passed, unless
:attr:`KubeFaults.pvc_never_binds`; a volume whose claim is gone is ``Released`` and binds
to no other claim until its ``claimRef`` loses its uid.
"""

from __future__ import annotations

from ._kube_controller import Controller
from ._kube_store import Obj


class VolumeBinder(Controller):
    """PVCs to PVs, as the persistentvolume-controller binds them."""

    def step(self) -> None:
        self._bind_volumes()

    def _bind_volumes(self) -> None:
        self._release_volumes()
        for pvc in self.store.find("PersistentVolumeClaim"):
            meta = pvc["metadata"]
            if meta.get("deletionTimestamp") or (pvc.get("status") or {}).get("phase") == "Bound":
                continue
            if self._age(pvc) < self.timings.bind:
                continue
            pv = self._matching_volume(pvc)
            if pv is None:
                wanted = (pvc.get("spec") or {}).get("volumeName")
                if wanted and self.store.get("PersistentVolume", None, wanted) is not None:
                    self.event(
                        pvc,
                        "FailedBinding",
                        f'volume "{wanted}" already bound to a different claim.',
                        warning=True,
                        component="persistentvolume-controller",
                    )
                continue
            if self.faults.pvc_never_binds:
                self.event(
                    pvc,
                    "VolumeMismatch",
                    f'Cannot bind to requested volume "{pv["metadata"]["name"]}": storageClassName does not match',
                    warning=True,
                    component="persistentvolume-controller",
                )
                continue
            self._bind(pvc, pv)

    def _release_volumes(self) -> None:
        """A volume whose claim is gone is Released (it keeps the old claim's uid and binds
        to no other claim); one whose claimRef lost its uid becomes Available again."""
        for pv in self.store.find("PersistentVolume"):
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            phase = (pv.get("status") or {}).get("phase")
            claim = self.store.get("PersistentVolumeClaim", ref.get("namespace"), ref.get("name", ""))
            if ref.get("uid") and phase == "Bound" and (claim is None or claim["metadata"]["uid"] != ref["uid"]):
                new_phase = "Released"
            elif not ref.get("uid") and phase == "Released":
                new_phase = "Available"
            else:
                continue

            def set_phase(o: Obj, phase: str = new_phase) -> None:
                o["status"] = {"phase": phase}

            self.store.update("PersistentVolume", None, pv["metadata"]["name"], set_phase)

    def _matching_volume(self, pvc: Obj) -> Obj | None:
        wanted = (pvc.get("spec") or {}).get("volumeName")
        for pv in self.store.find("PersistentVolume"):
            if pv["metadata"].get("deletionTimestamp") or (pv.get("status") or {}).get("phase") == "Released":
                continue
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if ref.get("uid") and ref["uid"] != pvc["metadata"]["uid"]:
                continue  # bound (or was) to another claim
            if wanted == pv["metadata"]["name"] or (
                ref.get("name") == pvc["metadata"]["name"] and ref.get("namespace") == pvc["metadata"].get("namespace")
            ):
                return pv
        return None

    def _bind(self, pvc: Obj, pv: Obj) -> None:
        pv_name = pv["metadata"]["name"]
        capacity = dict((pv.get("spec") or {}).get("capacity") or {})
        modes = list((pv.get("spec") or {}).get("accessModes") or [])

        def bind_pv(o: Obj) -> None:
            o["spec"]["claimRef"] = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": pvc["metadata"].get("namespace"),
                "name": pvc["metadata"]["name"],
                "uid": pvc["metadata"]["uid"],
            }
            o["status"] = {"phase": "Bound"}

        def bind_pvc(o: Obj) -> None:
            o["spec"]["volumeName"] = pv_name
            o["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"
            o["status"] = {"phase": "Bound", "accessModes": modes, "capacity": capacity}

        self.store.update("PersistentVolume", None, pv_name, bind_pv)
        self.store.update("PersistentVolumeClaim", pvc["metadata"].get("namespace"), pvc["metadata"]["name"], bind_pvc)
