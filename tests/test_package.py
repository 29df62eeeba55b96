"""The package surface: public names, typed marker, and a cheap import."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import rl_lustre
import rl_lustre.testing

PUBLIC = {
    # The objects and what they do.
    "Capacity",
    "Cluster",
    "GRPOJob",
    "LustreSizing",
    "LustreVolume",
    "Run",
    "__version__",
    "enable_output",
    "errors",
    "find_warm_start",
    "size_lustre",
    "SweepResult",
    "run_sweep",
    "wait_all",
    # What their methods take and return.
    "CheckItem",
    "CheckReport",
    "Checkpoint",
    "CheckpointSave",
    "ClusterMetrics",
    "Cost",
    "CostItem",
    "Diagnostics",
    "GoodputLedger",
    "JobInfo",
    "LostDetail",
    "LostNode",
    "MachinePrice",
    "NodeUsage",
    "Outcome",
    "OutageBudget",
    "Plan",
    "PlannedResource",
    "PriceTable",
    "Prices",
    "Progress",
    "QueueState",
    "Restart",
    "RunData",
    "SaveRecord",
    "Segment",
    "Series",
    "StepRecord",
    "Timeline",
    "TransferResult",
    "Unattributed",
    "VolumeMetrics",
    "WarmStartExport",
}
# Deep paths the docs showed before the public surface had an edge: they keep working.
OLD_PATHS = {
    "rl_lustre.plan.Plan": "Plan",
    "rl_lustre.plan.PlannedResource": "PlannedResource",
    "rl_lustre.cost.Cost": "Cost",
    "rl_lustre.cost.CostItem": "CostItem",
    "rl_lustre.cost.Prices": "Prices",
    "rl_lustre.catalog.MachinePrice": "MachinePrice",
    "rl_lustre.goodput.GoodputLedger": "GoodputLedger",
    "rl_lustre.goodput.LostDetail": "LostDetail",
    "rl_lustre.goodput.Unattributed": "Unattributed",
    "rl_lustre.goodput.NodeUsage": "NodeUsage",
    "rl_lustre.goodput.Segment": "Segment",
    "rl_lustre.check.CheckReport": "CheckReport",
    "rl_lustre.check.CheckItem": "CheckItem",
    "rl_lustre.nemo_rl.checkpoints.Checkpoint": "Checkpoint",
    "rl_lustre.run.Progress": "Progress",
    "rl_lustre.sweep.Outcome": "Outcome",
    "rl_lustre.sweep.run_sweep": "run_sweep",
    "rl_lustre.recovery.Restart": "Restart",
    "rl_lustre.recovery.LostNode": "LostNode",
    "rl_lustre.queueing.state.QueueState": "QueueState",
    "rl_lustre.queueing.state.Timeline": "Timeline",
    "rl_lustre.metrics.ClusterMetrics": "ClusterMetrics",
    "rl_lustre.outages.OutageBudget": "OutageBudget",
    "rl_lustre.plot.RunData": "RunData",
    "rl_lustre.plot.SaveRecord": "SaveRecord",
    "rl_lustre.shared.find_warm_start": "find_warm_start",
}
OLD_TESTING_PATHS = {
    "rl_lustre.testing._kube_kinds.KindInfo": "KindInfo",
    "rl_lustre.testing._kube_kinds.pod_merge_keys": "pod_merge_keys",
    "rl_lustre.testing._kube_kinds.register_kind": "register_kind",
    "rl_lustre.testing.kube.KubeFake": "KubeFake",
}
HEAVY = ("ray", "kubernetes", "grpc", "google.cloud", "google.api_core", "hydra", "omegaconf", "rich")


def test_all_is_the_public_names() -> None:
    assert set(rl_lustre.__all__) == PUBLIC
    assert len(rl_lustre.__all__) == len(set(rl_lustre.__all__))
    for name in rl_lustre.__all__:
        assert hasattr(rl_lustre, name), name
    public_attrs = {n for n in vars(rl_lustre) if not n.startswith("_")}
    # Submodules are importable, but the only public *objects* are the listed ones.
    objects = {n for n in public_attrs if not isinstance(getattr(rl_lustre, n), type(rl_lustre))}
    assert objects <= PUBLIC


def test_errors_root() -> None:
    from rl_lustre import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        if issubclass(cls, Warning):
            # Warnings are not errors: they derive from the built-in warning they resemble.
            assert issubclass(cls, UserWarning), name
            continue
        assert issubclass(cls, errors.RLLustreError), name
    assert issubclass(errors.ConfigError, ValueError)


def test_typed_marker_shipped() -> None:
    assert (Path(rl_lustre.__file__).parent / "py.typed").is_file()


def test_import_is_cheap() -> None:
    code = (
        "import sys, json, rl_lustre;"
        f"heavy={HEAVY!r};"
        "print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_import_loads_the_names_on_first_use() -> None:
    code = "import sys, json, rl_lustre; print(json.dumps(sorted(m for m in sys.modules if m.startswith('rl_lustre'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["rl_lustre", "rl_lustre.errors"]
    code = (
        "import sys, rl_lustre; rl_lustre.Plan;"
        "print(*(m in sys.modules for m in ('rl_lustre.plan.graph', 'rl_lustre.cluster')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


def test_dir_lists_the_public_names_and_an_unknown_one_is_an_attribute_error() -> None:
    for module in (rl_lustre, rl_lustre.testing):
        assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="module 'rl_lustre' has no attribute 'Plann'"):
        rl_lustre.Plann  # noqa: B018
    with pytest.raises(AttributeError, match=r"module 'rl_lustre\.testing' has no attribute 'FakeGPC'"):
        rl_lustre.testing.FakeGPC  # noqa: B018


def test_public_objects_are_named_by_their_public_module() -> None:
    for module in (rl_lustre, rl_lustre.errors, rl_lustre.testing):
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__name__ == name:
                assert obj.__module__ == module.__name__, f"{module.__name__}.{name}: add @public(...)"
    assert repr(rl_lustre.Plan) == "<class 'rl_lustre.Plan'>"
    assert repr(rl_lustre.testing.FakeGCP) == "<class 'rl_lustre.testing.FakeGCP'>"
    # A pickle names the public path, and reads back.
    prices = rl_lustre.Prices(compute_discount=0.25)
    assert b"rl_lustre.prices" not in pickle.dumps(prices)
    assert pickle.loads(pickle.dumps(prices)) == prices
    # The methods too: the reference docs read a method of another module as an alias.
    assert rl_lustre.Plan.cost.__module__ == "rl_lustre"
    assert rl_lustre.Cluster.__init__.__module__ == "rl_lustre"


def test_old_deep_imports_the_docs_showed_still_work() -> None:
    for table, home in ((OLD_PATHS, rl_lustre), (OLD_TESTING_PATHS, rl_lustre.testing)):
        for path, name in table.items():
            module, _, attribute = path.rpartition(".")
            assert getattr(importlib.import_module(module), attribute) is getattr(home, name), path


def test_type_checkers_see_every_lazy_name() -> None:
    """Each lazily imported name is imported under ``TYPE_CHECKING`` too, from the same
    module, so that mypy and IDEs see its type rather than ``__getattr__``'s ``Any``."""
    for module in (rl_lustre, rl_lustre.testing):
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test).endswith("TYPE_CHECKING"))
        typed = {
            alias.asname or alias.name: ("." * node.level + (node.module or ""), alias.name)
            for node in block.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        homes = {
            name: home if isinstance(home, tuple) else (home, name)
            for name, home in module._HOMES.items()  # type: ignore[attr-defined]
        }
        assert typed == homes, module.__name__
        assert set(homes) <= set(module.__all__), module.__name__


def test_uv_run_installs_no_development_tools() -> None:
    """`uv run examples/quickstart.py` syncs the default groups: there must be none."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert pyproject["tool"]["uv"]["default-groups"] == []
    assert any(dep.startswith("jsonschema") for dep in pyproject["project"]["dependencies"])


def test_tests_read_nothing_outside_the_repository() -> None:
    here = Path(__file__).resolve().parent
    for path in here.glob("*.py"):
        text = path.read_text()
        assert "shared" + "/ref" not in text, path
        assert "parents" + "[2]" not in text, path
