"""rl_lustre: NeMo-RL GRPO post-training on GKE Spot GPUs with Managed Lustre, from Python.

    >>> import rl_lustre
    >>> cluster = rl_lustre.Cluster(name="rl-demo", project="my-project",
    ...                             region="us-east1", zone="us-east1-b")
    >>> job = rl_lustre.GRPOJob(name="grpo-run-1")

``Cluster`` provisions GKE with a Spot GPU pool, ``LustreVolume`` a Managed Lustre
instance, and ``GRPOJob`` describes a NeMo-RL run submitted through the Ray Jobs API.

The public API is exactly what ``rl_lustre``, ``rl_lustre.errors`` and ``rl_lustre.testing``
export (their ``__all__``): the objects above, every type their methods take or return
(``rl_lustre.Plan``, ``rl_lustre.Prices``, ``rl_lustre.GoodputLedger``, ...), the errors and
the fakes. Every other module is internal, whatever its name.

Importing this package is cheap: each name loads its module on first use, and ray,
kubernetes and the Google clients load only when something needs them.
"""

import importlib as _importlib
import typing as _typing

from . import errors

if _typing.TYPE_CHECKING:
    from ._output import enable_output
    from .catalog import MachinePrice, PriceTable
    from .check_items import CheckItem, CheckReport
    from .cluster import Cluster
    from .cost import Cost, CostItem
    from .gcp.lustre import TransferResult
    from .goodput.attribute import Segment
    from .goodput.ledger import GoodputLedger, NodeUsage, Unattributed
    from .goodput.recoveries import LostDetail
    from .job import GRPOJob
    from .metrics import ClusterMetrics, Series, VolumeMetrics
    from .nemo_rl.checkpoints import Checkpoint
    from .nemo_rl.logs import CheckpointSave, StepRecord
    from .outages import OutageBudget
    from .plan.graph import Plan, PlannedResource
    from .plot import RunData, SaveRecord
    from .prices import Prices
    from .queueing.state import QueueState, Timeline
    from .ray.jobs import JobInfo
    from .recovery.diagnostics import Diagnostics
    from .recovery.restarts import LostNode, Restart
    from .run import Progress, Run
    from .shared import WarmStartExport, find_warm_start
    from .sizing import LustreSizing, size_lustre
    from .spec.capacity import Capacity
    from .sweep import run_sweep, wait_all
    from .sweep_result import Outcome, SweepResult
    from .volume import LustreVolume

__version__ = "0.1.0.dev0"

# Each public name and the module that defines it, imported on first use.
_HOMES = {
    # The objects and what they do.
    "Capacity": ".spec.capacity",
    "Cluster": ".cluster",
    "GRPOJob": ".job",
    "LustreSizing": ".sizing",
    "LustreVolume": ".volume",
    "Run": ".run",
    "SweepResult": ".sweep_result",
    "enable_output": "._output",
    "find_warm_start": ".shared",
    "run_sweep": ".sweep",
    "size_lustre": ".sizing",
    "wait_all": ".sweep",
    # What their methods take and return.
    "CheckItem": ".check_items",
    "CheckReport": ".check_items",
    "Checkpoint": ".nemo_rl.checkpoints",
    "CheckpointSave": ".nemo_rl.logs",
    "ClusterMetrics": ".metrics",
    "Cost": ".cost",
    "CostItem": ".cost",
    "GoodputLedger": ".goodput.ledger",
    "JobInfo": ".ray.jobs",
    "LostDetail": ".goodput.recoveries",
    "LostNode": ".recovery.restarts",
    "Diagnostics": ".recovery.diagnostics",
    "MachinePrice": ".catalog",
    "NodeUsage": ".goodput.ledger",
    "Outcome": ".sweep_result",
    "OutageBudget": ".outages",
    "Plan": ".plan.graph",
    "PlannedResource": ".plan.graph",
    "PriceTable": ".catalog",
    "Prices": ".prices",
    "Progress": ".run",
    "QueueState": ".queueing.state",
    "Restart": ".recovery.restarts",
    "RunData": ".plot",
    "SaveRecord": ".plot",
    "Segment": ".goodput.attribute",
    "Series": ".metrics",
    "StepRecord": ".nemo_rl.logs",
    "Timeline": ".queueing.state",
    "TransferResult": ".gcp.lustre",
    "Unattributed": ".goodput.ledger",
    "VolumeMetrics": ".metrics",
    "WarmStartExport": ".shared",
}

__all__ = [
    "Capacity",
    "CheckItem",
    "CheckReport",
    "Checkpoint",
    "CheckpointSave",
    "Cluster",
    "ClusterMetrics",
    "Cost",
    "CostItem",
    "Diagnostics",
    "GRPOJob",
    "GoodputLedger",
    "JobInfo",
    "LostDetail",
    "LostNode",
    "LustreSizing",
    "LustreVolume",
    "MachinePrice",
    "NodeUsage",
    "OutageBudget",
    "Outcome",
    "Plan",
    "PlannedResource",
    "PriceTable",
    "Prices",
    "Progress",
    "QueueState",
    "Restart",
    "Run",
    "RunData",
    "SaveRecord",
    "Segment",
    "Series",
    "StepRecord",
    "SweepResult",
    "Timeline",
    "TransferResult",
    "Unattributed",
    "VolumeMetrics",
    "WarmStartExport",
    "__version__",
    "enable_output",
    "errors",
    "find_warm_start",
    "run_sweep",
    "size_lustre",
    "wait_all",
]


if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and flag a misspelt name

    def __getattr__(name: str) -> object:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(_importlib.import_module(home, __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
