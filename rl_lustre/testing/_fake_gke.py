"""``FakeGKE``: a whole GKE deployment on this machine, for testing your own GKE script end to end.

It stands up, on loopback: :class:`~rl_lustre.testing.FakeGCP` (the Google APIs),
a :class:`~rl_lustre.testing.KubeFake` (the GKE cluster's Kubernetes API, validating what it
receives and playing KubeRay) whose head service forwards to a real local Ray head, and a
rehearsal *image*: a directory laid out as NeMo-RL is in its container image, whose
``examples/run_grpo_math.py`` hands NeMo-RL's command line to the rehearsal driver
(:mod:`rl_lustre.rehearsal`) and whose ``examples/converters/*.py`` hand the converters'
to the rehearsal's converter (:mod:`rl_lustre.rehearsal.converter`), and the image's
``uv run [--extra X] python`` on the head's ``PATH``.
Everything is removed again on exit.

Only two things about your specs change, through :meth:`FakeGKE.cluster` and
:meth:`FakeGKE.job`: the volume's mount path becomes a directory here (the "pods" run on
this machine; it *is* the fake Lustre instance's files, which ``down()`` exports) and the
job's ``nemo_rl_dir`` becomes the rehearsal image. The rest of your
script (``up()``, ``submit()``, ``wait()``, ``checkpoints()``, ``run_sweep``, ``down()``)
runs unchanged, on the GKE backend.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from .._public import public
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..ray.head import LocalHead
    from ..spec.cluster import ClusterSpec
    from ..spec.job import JobSpec
    from ._fake import FakeGCP
    from .kube import KubeFake

C = TypeVar("C", bound="ClusterSpec")
J = TypeVar("J", bound="JobSpec")

RECIPES = Path(__file__).resolve().parents[1] / "nemo_rl" / "recipes" / "v0.4.0"

# The image's examples/run_grpo_math.py: NeMo-RL's command line, handed to the rehearsal.
_GRPO_ENTRYPOINT = """\
# The rehearsal image's examples/run_grpo_math.py (rl_lustre.testing.FakeGKE): NeMo-RL's
# command line, handed to the rehearsal driver, which does not train.
import sys

from rl_lustre.rehearsal import main

sys.exit(main(["--step-seconds", {step_seconds!r}, "--checkpoint-scale", {scale!r}, *sys.argv[1:]]))
"""

# The image's examples/converters/*.py: NeMo-RL's converters' command lines, handed to the
# rehearsal's converter, which writes their output layout and converts nothing.
_CONVERTER = """\
# The rehearsal image's examples/converters/{name} (rl_lustre.testing.FakeGKE): NeMo-RL's
# converter's command line, handed to the rehearsal's, which converts nothing.
import sys

from rl_lustre.rehearsal.converter import main

sys.exit(main(["--backend", {backend!r}, "--checkpoint-scale", {scale!r}, *sys.argv[1:]]))
"""

# The image's uv and python, as the GKE entrypoint uses them (cd <nemo_rl_dir> && uv run python ...).
_UV = """\
#!/bin/sh
# The rehearsal image's uv (rl_lustre.testing.FakeGKE): only 'uv run [--extra X] python ARGS...'.
if [ "$1" = run ]; then
  shift
  while [ "$1" = --extra ]; do shift 2; done
  if [ "$1" = python ]; then
    shift
    exec {python} "$@"
  fi
fi
echo "the rehearsal image's uv runs only 'uv run [--extra X] python ...', not: uv $*" >&2
exit 2
"""
_PYTHON = """\
#!/bin/sh
# The rehearsal image's python (rl_lustre.testing.FakeGKE): the one rl_lustre runs on here.
exec {python} "$@"
"""

# The GPU node FakeGKE's Ray head plays (its GPUs and CPUs are declared, as is its memory).
_NODE_MACHINE = "a4-highgpu-8g"


def node_memory() -> int:
    """Bytes of Ray's ``memory`` resource on the node FakeGKE's head plays: the memory a Ray
    worker pod of an A4 node asks for (the plan's ``worker_memory``), which KubeRay hands to
    Ray as the node's memory. Logical, like its GPUs: a job that asks for the memory of a
    real node (a checkpoint's conversion, :meth:`rl_lustre.Run.export_model`) is scheduled
    as on GKE; nothing is allocated.

    Examples:
        >>> node_memory() // 2**30
        1000
    """
    from ..catalog import GPU_MACHINE_TYPES

    quantity = GPU_MACHINE_TYPES[_NODE_MACHINE].worker_memory
    if not quantity.endswith("Gi") or not quantity[:-2].isdigit():
        raise ValueError(f"{_NODE_MACHINE}'s worker_memory {quantity!r} is not a whole number of Gi")
    return int(quantity[:-2]) * 2**30


@public("rl_lustre.testing")
class FakeGKE:
    """The Google APIs, a GKE cluster's Kubernetes and a real Ray head, on this machine.

    Test your own GKE script end to end, ``submit()`` and ``wait()`` included, with no
    credentials and nothing sent off this machine::

        with FakeGKE() as gke:
            gke.gcp.seed_bucket("my-results")      # my_cluster has results="gs://my-results/..."
            cluster = gke.cluster(my_cluster)      # the volume mounted at a directory here
            job = gke.job(my_job)                  # NeMo-RL from the rehearsal image
            with cluster:
                run = cluster.submit(job)
                assert run.wait() == "SUCCEEDED"
            assert gke.leftovers() == {"gcp": [], "kube": []}   # the run's results are in the bucket

    The Ray head is one node of ``gpus_per_node`` GPUs and an A4 worker pod's memory
    (:func:`node_memory`), with Ray's token auth off (so a
    cluster that lists ``RAY_AUTH_TOKEN`` among its secrets is refused by :meth:`cluster`);
    jobs run the rehearsal driver, which rehearses orchestration and checkpoint storage
    but does not train. Entering it sets the emulator variables of :class:`FakeGCP`
    (restored on exit); leaving it stops the head, the fakes, and removes ``root``.

    Args:
        gpus_per_node: GPUs the head offers (A4 nodes have 8).
        step_seconds: how long a rehearsed training step takes.
        checkpoint_scale: rehearsal checkpoints are this fraction of the real size.
        root: the directory for the head, the image and the volume; by default a new
            temporary one, removed on exit (a given one is left in place).
        validate: check every object the Kubernetes fake receives against the real schemas
            (:func:`rl_lustre.testing.kube_schema_validator`).
        latency: per-method latencies of the Google API fakes (see :class:`FakeGCP`).

    Attributes:
        gcp: the :class:`FakeGCP` (catalog, faults, requests, ``leaked()``), once entered.
        kube: the :class:`KubeFake` (objects, requests), once entered.
        image: the rehearsal image directory (what :meth:`job` sets as ``nemo_rl_dir``).
        mount_path: the directory that plays the Lustre volume (what :meth:`cluster` sets).
    """

    def __init__(
        self,
        *,
        gpus_per_node: int = 8,
        step_seconds: float = 0.25,
        checkpoint_scale: float = 1e-5,
        root: str | os.PathLike[str] | None = None,
        validate: bool = True,
        latency: dict[str, float] | None = None,
    ) -> None:
        from .. import _validate as v

        owner = "FakeGKE"
        v.need(owner, "gpus_per_node", gpus_per_node, int, "a number of GPUs (int)")
        if isinstance(gpus_per_node, bool) or gpus_per_node < 1:
            raise ConfigError(owner, "gpus_per_node", gpus_per_node, "must be at least 1")
        for field, value in (("step_seconds", step_seconds), ("checkpoint_scale", checkpoint_scale)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(owner, field, value, "must be a number above 0")
        self.gpus_per_node = gpus_per_node
        self.step_seconds = float(step_seconds)
        self.checkpoint_scale = float(checkpoint_scale)
        self._given_root = None if root is None else Path(root)
        self._validate = validate
        self._latency = latency
        self.root: Path | None = None
        self.gcp: FakeGCP | None = None
        self.kube: KubeFake | None = None
        self.head: LocalHead | None = None
        self._head_args: dict[str, Any] = {}

    def __repr__(self) -> str:
        where = f"head at {self.head.dashboard_url}" if self.head is not None else "not running"
        return f"FakeGKE({where})"

    # the rehearsal image and volume

    @property
    def image(self) -> Path:
        """The rehearsal image: NeMo-RL's layout, ``examples/run_grpo_math.py`` and the recipes."""
        return self._root() / "nemo-rl"

    @property
    def mount_path(self) -> Path:
        """The directory that plays the volume's mount in the pods."""
        return self._root() / "lustre"

    def _root(self) -> Path:
        if self.root is None:
            raise RuntimeError("FakeGKE is not running: use it as `with FakeGKE() as gke:`")
        return self.root

    def _write_image(self, tools: Path) -> None:
        examples = self.image / "examples"
        (examples / "configs").mkdir(parents=True)
        (examples / "run_grpo_math.py").write_text(
            _GRPO_ENTRYPOINT.format(step_seconds=str(self.step_seconds), scale=str(self.checkpoint_scale))
        )
        for recipe in RECIPES.glob("*.yaml"):
            shutil.copy(recipe, examples / "configs" / recipe.name)
        (examples / "converters").mkdir()
        for name, backend in (("convert_dcp_to_hf.py", "dtensor"), ("convert_megatron_to_hf.py", "megatron")):
            (examples / "converters" / name).write_text(
                _CONVERTER.format(name=name, backend=backend, scale=str(self.checkpoint_scale))
            )
        tools.mkdir(parents=True)
        python = shlex.quote(sys.executable)
        for name, text in (("uv", _UV), ("python", _PYTHON)):
            (tools / name).write_text(text.format(python=python))
            (tools / name).chmod(0o755)
        self.mount_path.mkdir()

    # the specs

    def cluster(self, cluster: C) -> C:
        """``cluster`` as it runs on these fakes: its volume mounted at :attr:`mount_path`.

        Raises:
            ConfigError: a cluster that is not on the GKE backend, has more than one node
                (the head here is one node), or turns Ray token auth on.
        """
        from ..kube.raycluster import RAY_AUTH_TOKEN

        if cluster.backend != "gke":
            raise ConfigError(
                "FakeGKE.cluster",
                "backend",
                cluster.backend,
                "must be 'gke': local clusters need no fake (Cluster.local runs a real Ray head)",
            )
        if cluster.num_nodes != 1:
            raise ConfigError(
                "FakeGKE.cluster",
                "num_nodes",
                cluster.num_nodes,
                f"must be 1 on FakeGKE: its Ray head is one node of {self.gpus_per_node} GPUs "
                "(test with attrs.evolve(cluster, num_nodes=1))",
            )
        if RAY_AUTH_TOKEN in cluster.secrets:
            raise ConfigError(
                "FakeGKE.cluster",
                "secrets",
                RAY_AUTH_TOKEN,
                "FakeGKE's Ray head runs without token auth; leave RAY_AUTH_TOKEN out of "
                "the secrets of the cluster you test on it",
            )
        fake = attrs.evolve(cluster, mount_path=str(self.mount_path))  # (raises if not running)
        if fake.volume is not None and self.gcp is not None:
            # The Lustre instance is the directory the pods mount: what jobs write there is
            # what the instance holds, exports and loses when it is deleted.
            self.gcp.volume_dir(fake.volume.resource_name(), self.mount_path)
        return fake

    def job(self, job: J) -> J:
        """``job`` as it runs on these fakes: NeMo-RL from the rehearsal :attr:`image`."""
        return attrs.evolve(job, nemo_rl_dir=str(self._root() / "nemo-rl"))

    def leftovers(self, name: str | None = None) -> dict[str, list[str] | list[dict[str, Any]]]:
        """What is left of deployment ``name`` (by default any) on the fakes: Google
        resources (``gcp.leaked``) and Kubernetes objects. Both empty after ``down()``."""
        if self.gcp is None or self.kube is None:
            raise RuntimeError("FakeGKE is not running: use it as `with FakeGKE() as gke:`")
        self.gcp.settle()
        return {"gcp": list(self.gcp.leaked(name)), "kube": list(self.kube.objects())}

    # lifecycle

    def start(self) -> FakeGKE:
        """Start the head, the Kubernetes fake and the Google API fakes (in that order)."""
        from ..backends.local import rehearsal_resources
        from ..ray.head import start_local_head
        from ..spec.cluster import ClusterSpec
        from ._fake import FakeGCP
        from .kube import KubeFake
        from .kube import schema_validator as kube_schema_validator

        if self.root is not None:
            raise RuntimeError("FakeGKE is already running")
        if self._given_root is not None:
            self._given_root.mkdir(parents=True, exist_ok=True)
            self.root = Path(tempfile.mkdtemp(prefix="fake-gke-", dir=self._given_root))
        else:
            # Short: Ray's socket paths under the head's temp dir must fit in 107 bytes.
            self.root = Path(tempfile.mkdtemp(prefix="rl-fgke-"))
        try:
            tools = self.root / "image-bin"
            self._write_image(tools)
            env = dict(os.environ)
            env["PATH"] = os.pathsep.join([str(tools), env.get("PATH", "")])
            spec = ClusterSpec.local("fake-gke-head", volume_dir=self.root / "head", gpus_per_node=self.gpus_per_node)
            num_cpus, num_gpus = rehearsal_resources(spec)
            self._head_args = {
                "num_cpus": num_cpus,
                "num_gpus": num_gpus,
                "memory": node_memory(),
                "env": env,
                "auth": "disabled",
            }
            self.head = start_local_head(self.root / "ray", **self._head_args)
            host, port = self.head.dashboard_url.removeprefix("http://").rsplit(":", 1)
            self.kube = KubeFake(
                validate=kube_schema_validator() if self._validate else None,
                head_target=(host, int(port)),
                ray_heads=self,
                programs=True,
            ).start()
            self.gcp = FakeGCP(kube=self.kube, latency=self._latency).start()
        except BaseException:
            self.stop()
            raise
        return self

    # the Ray heads behind the head pod (KubeFake's ray_heads, for rl_lustre.testing.lose_head)

    def kill(self) -> str:
        """Kill the head's processes at once, as its pod's deletion (or an OOM kill) does."""
        from ..ray.processes import kill_head_processes

        head = self.head
        if head is None:
            raise RuntimeError("FakeGKE has no Ray head running")
        kill_head_processes(head.temp_dir, spare_sessions=set())
        if head._process is not None:
            head._process.wait()
        return f"pid {head.pid}"

    def start_head(self) -> tuple[str, int]:
        """A new Ray head in place of the lost one (new ports, an empty job table)."""
        from ..ray.head import start_local_head

        self.head = start_local_head(self._root() / "ray", **self._head_args)
        host, port = self.head.dashboard_url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    def stop(self) -> None:
        """Stop everything started (the fakes, then the head) and remove the root directory."""
        errors: list[BaseException] = []
        for part in (self.gcp, self.kube, self.head):
            if part is None:
                continue
            try:
                part.stop()
            except Exception as exc:
                errors.append(exc)
        self.gcp = self.kube = self.head = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        if errors:
            raise errors[0]

    def __enter__(self) -> FakeGKE:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
