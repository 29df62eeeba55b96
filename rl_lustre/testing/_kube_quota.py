"""ResourceQuota's ``pods`` limit for :class:`~rl_lustre.testing.kube.KubeFake`, as the API
server's ResourceQuota admission plugin enforces it: a pod whose creation would take a
namespace's non-terminal pods over a quota's ``spec.hard.pods`` is refused with 403 and the
plugin's words (``pods "x" is forbidden: exceeded quota: q, requested: pods=1, used:
pods=3, limited: pods=3``). Only ``pods`` is counted; held to the real plugin by
``tests/test_kube_divergences.py``.
"""

from __future__ import annotations

from ._kube_kinds import KindInfo, register_kind
from ._kube_store import ApiError, Obj, Store

__all__ = ["install"]

_TERMINAL = ("Succeeded", "Failed")

register_kind(KindInfo("ResourceQuota", "v1", "resourcequotas", True, ("quota",), status=True))


def install(store: Store) -> None:
    """Check every pod created in ``store`` against its namespace's ResourceQuotas."""

    def admit(pod: Obj) -> None:
        meta = pod["metadata"]
        ns = meta.get("namespace") or "default"
        used = sum(1 for p in store.find("Pod", ns) if (p.get("status") or {}).get("phase") not in _TERMINAL)
        for quota in store.find("ResourceQuota", ns):
            hard = ((quota.get("spec") or {}).get("hard") or {}).get("pods")
            if hard is not None and used + 1 > int(hard):
                raise ApiError(
                    403,
                    "Forbidden",
                    f'pods "{meta.get("name")}" is forbidden: exceeded quota: '
                    f"{quota['metadata']['name']}, requested: pods=1, used: pods={used}, "
                    f"limited: pods={int(hard)}",
                )

    store.admission["Pod"] = admit
