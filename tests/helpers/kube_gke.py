"""The worlds ``test_kube_gke`` and ``test_kube_spot`` run the GKE backend in: FakeGCP for
Google's APIs, reporting as the GKE cluster either the real control plane (``kube_plane``) or
a :class:`~rl_lustre.testing.KubeFake` (a test helper)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake, kube_schema_validator

from .nemo_image import nemo_rl_image

IMAGE = "rayproject/ray:2.60.0"
# The image's examples/run_grpo_math.py: NeMo-RL's command line, handed to the rehearsal driver.
SHIM = """\
import sys

from rl_lustre.rehearsal import main

sys.exit(main([{extra}*sys.argv[1:]]))
"""
JOB = GRPOJob(
    name="kg",
    recipe="grpo_math_1B",
    model="Qwen/Qwen2.5-1.5B",
    dataset="OpenMathInstruct-2",
    num_prompts_per_step=4,
    num_generations_per_prompt=8,
    train_global_batch_size=32,
    max_num_steps=4,
    save_period=2,
    keep_top_k=2,
)
WORLDS = [pytest.param("real", marks=pytest.mark.kube), pytest.param("fake", marks=pytest.mark.slow)]


def image(root: Path, *extra: str) -> Path:
    """A directory laid out like NeMo-RL in its container image, running the rehearsal."""
    return nemo_rl_image(root, SHIM.format(extra="".join(f"{a!r}, " for a in extra)))


@attrs.define
class World:
    gcp: FakeGCP
    kube: Any  # the real ControlPlane, or a KubeFake
    spec: dict[str, Any]

    def cluster(self) -> Cluster:
        cluster = Cluster(**self.spec)
        return cluster.use_backend(GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY))

    def api(self) -> Any:
        return self.kube.api_client()


def world_on(
    request: pytest.FixtureRequest, spec: dict[str, Any], head_target: tuple[str, int], raylets: Any = None
) -> Iterator[World]:
    """The world of ``request.param``; ``raylets(pod, node, resources)`` backs each Ray worker
    pod with a raylet declaring what its ``ray start`` would (on the real plane, read from
    the operator's command: ``kube_kubelet.operator_ray_start_resources``)."""
    if request.param == "real":
        plane = request.getfixturevalue("kube_plane")
        saved = plane.head_target, plane.raylets
        plane.head_target = head_target
        plane.raylets = raylets
        try:
            with FakeGCP(kube=plane) as gcp:
                yield World(gcp, plane, spec)
        finally:
            plane.release_raylets()
            plane.head_target, plane.raylets = saved
    else:
        with (
            KubeFake(validate=kube_schema_validator(), head_target=head_target, raylets=raylets) as fake,
            FakeGCP(kube=fake) as gcp,
        ):
            yield World(gcp, fake, spec)


def ray_token(head: Any) -> str:
    token = str(head.headers().get("Authorization", "")).removeprefix("Bearer ")
    if not token:
        pytest.skip("the Ray head does not run in token mode")
    return token
