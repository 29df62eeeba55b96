"""rl_lustre: NeMo-RL GRPO post-training on GKE Spot GPUs with Managed Lustre, from Python.

    >>> import rl_lustre
    >>> cluster = rl_lustre.Cluster(name="rl-demo", project="my-project",
    ...                             region="us-east1", zone="us-east1-b")
    >>> job = rl_lustre.GRPOJob(name="grpo-run-1")

``Cluster`` provisions GKE with a Spot GPU pool, ``LustreVolume`` a Managed Lustre
instance, and ``GRPOJob`` describes a NeMo-RL run submitted through the Ray Jobs API.
Importing this package is cheap: ray, kubernetes and the Google clients load on first use.
"""

from . import errors
from ._output import enable_output
from .cluster import Cluster
from .job import GRPOJob
from .run import Run
from .sizing import LustreSizing, size_lustre
from .spec.capacity import Capacity
from .sweep import run_sweep, wait_all
from .sweep_result import SweepResult
from .volume import LustreVolume

__version__ = "0.1.0.dev0"

__all__ = [
    "Capacity",
    "Cluster",
    "GRPOJob",
    "LustreSizing",
    "LustreVolume",
    "Run",
    "SweepResult",
    "__version__",
    "enable_output",
    "errors",
    "run_sweep",
    "size_lustre",
    "wait_all",
]
