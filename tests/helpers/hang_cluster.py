"""A local deployment with two real worker raylets whose runs can be frozen, for the hang tests
(``test_hang_local``) and the hang benchmark's test: one for the session, started by the first
test that asks for it. Its head holds a declared secret (``HF_TOKEN``), as a GKE head gets it
from the cluster's Secret, so that the tests can check no bundle carries it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rl_lustre import Cluster

from .ray_fixtures import FAKE_HF_TOKEN

# A step long enough that a freeze lands where a test means it to (before the step's all-reduce).
STEP_SECONDS = 1.0


@pytest.fixture(scope="session")
def hang_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """``Cluster.local(..., worker_nodes=2)``: two worker nodes of one GPU each, up for the session."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("the local backend reads the process table from /proc (Linux)")
    cluster = Cluster.local(
        f"rll-hang-{os.getpid()}",
        volume_dir=tmp_path_factory.mktemp("hang-volume"),
        num_nodes=2,
        gpus_per_node=1,
        worker_nodes=2,
        rehearsal_step_seconds=STEP_SECONDS,
        secrets=("HF_TOKEN",),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", FAKE_HF_TOKEN)
        cluster.up()
    with cluster:  # adopts the head up() started; down at the end of the session
        yield cluster
