"""The reference deployment's Kubernetes objects, applied to a KubeFake (a test helper)."""

from __future__ import annotations

from typing import Any

from rl_lustre import Cluster
from rl_lustre.kube.apply import apply_manifests, wait_ready
from rl_lustre.kube.manifests import build_manifests
from rl_lustre.testing.kube import KubeFake

from .specs import GKE


def deploy_reference(fake: KubeFake, name: str) -> Any:
    """Apply a one-node deployment named ``name`` to ``fake``, wait until it is ready, and
    return the fake's API client."""
    cluster = Cluster(**{**GKE, "name": name}, num_nodes=1)
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"  # as LustreVolume.refresh() would
    manifests = build_manifests(cluster, secret_values={"HF_TOKEN": "hf_x"}, redact=False)
    api = fake.api_client()
    apply_manifests(api, manifests, deployment=name)
    wait_ready(api, manifests, timeout=30)
    return api
