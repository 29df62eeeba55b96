"""Whether a RayCluster's head was lost, from its head pod (rl_lustre/kube/head_pod.py): what
lets a GKE submit skip reading a run's directory through a helper job on the head."""

from __future__ import annotations

import time
from typing import Any

from helpers.rayclusters import raycluster

from rl_lustre.kube.client import ResourceClient
from rl_lustre.kube.head_pod import read_head_replaced
from rl_lustre.testing.kube import KubeFake


def _head(fake: KubeFake) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        heads = [p for p in fake.objects("Pod") if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        if heads and heads[0].get("status", {}).get("phase") == "Running":
            return heads[0]
        assert time.monotonic() < deadline, "the operator made no head pod"
        time.sleep(0.05)


def test_a_head_restarted_in_place_or_made_later_is_told_and_the_first_head_is_not() -> None:
    with KubeFake() as fake:
        api = fake.api_client()
        ResourceClient(api, "RayCluster", "default").create(raycluster("rc", replicas=1))
        head = _head(fake)["metadata"]["name"]
        # KubeRay's first head pod, never restarted: no head was lost.
        assert read_head_replaced(api, "default", head, "rc") is False

        def restarted(o: dict[str, Any]) -> None:
            for status in o["status"]["containerStatuses"]:
                status["restartCount"] = 1

        fake._on_loop(lambda: fake._store.update("Pod", "default", head, restarted))
        assert read_head_replaced(api, "default", head, "rc") is True

        def reborn(o: dict[str, Any]) -> None:
            o["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"

        # A head pod made long after its RayCluster (the first one was deleted): replaced.
        fake._on_loop(lambda: fake._store.update("RayCluster", "default", "rc", reborn))
        fake._on_loop(
            lambda: fake._store.update("Pod", "default", head, lambda o: o["status"].update(containerStatuses=[]))
        )
        assert read_head_replaced(api, "default", head, "rc") is True
        # What cannot be read is not known: the caller reads the run's directory instead.
        assert read_head_replaced(api, "default", "no-such-pod", "rc") is None
