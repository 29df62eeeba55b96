"""The base specs tests build clusters on, in one place: where a test cluster lives and the
spec every GKE test starts from. A test that differs from a base says how, in the open:
``Cluster(**{**GKE, "num_nodes": 2})``.
"""

from __future__ import annotations

from typing import Any

# Where every GKE test cluster lives: a made-up project, in the reference workflow's region
# and zone (us-east1-b offers A4 machines and Managed Lustre).
PROJECT = "my-project"
REGION = "us-east1"
ZONE = "us-east1-b"

# A GKE cluster with Cluster's defaults (the reference workflow: Spot A4 nodes, RDMA, the
# preload image, ...), named "demo".
GKE: dict[str, Any] = {"name": "demo", "project": PROJECT, "region": REGION, "zone": ZONE}

# The reference workflow's cluster, named as the reference names it.
REFERENCE: dict[str, Any] = {**GKE, "name": "ray-a4-gpu-spot"}

# What most provisioning tests deploy on the fakes: two nodes on TCP (one NIC, no RDMA
# networks) and no preload image, whose build has tests of its own (test_preload*.py).
SMALL: dict[str, Any] = {**GKE, "num_nodes": 2, "fabric": "tcp", "preload_image": False}
