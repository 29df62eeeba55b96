"""The package's import graph: layers that only look down, and no import cycles.

The graph is read from the sources with ``ast``: every ``import`` and ``from ... import``
of an ``rl_lustre`` module, at the top of a module, inside a function, or under
``if TYPE_CHECKING:``, with relative imports resolved. Importing ``rl_lustre.a.b`` from
outside ``rl_lustre.a`` also runs ``rl_lustre/a/__init__.py``, so at run time that is an
edge too (the root package, which only re-exports the public names, is left out: Python
runs it before any submodule anyway).

- Counting what runs (top-level and in-function imports), there is no cycle at all.
- Counting ``TYPE_CHECKING`` imports too, no cycle is larger than
  :data:`MAX_TYPING_CYCLE` modules.
- Every module belongs to exactly one layer of the table in ``docs/architecture.md``,
  and imports only from its own layer or the ones below (type hints included).
- No module (of the package, the benchmarks or the examples) is longer than
  :data:`MAX_MODULE_LINES`: a newcomer reads one in a sitting.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import attrs

import rl_lustre
from rl_lustre import plankeys

PACKAGE = Path(rl_lustre.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAX_TYPING_CYCLE = 5
MAX_MODULE_LINES = 600
# Where modules live: the package, and beside it in a checkout the benchmarks and examples.
SIZED = [PACKAGE, PACKAGE.parent / "benchmarks", PACKAGE.parent / "examples"]


@attrs.frozen
class Edge:
    source: str
    target: str
    kind: str  # "top", "function", "typing" or "package" (the implied __init__)
    line: int


def _modules(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([package, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with its kind: "top", "function" or "typing"."""

    def walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk_stmt(stmt, "typing")
                for stmt in child.orelse:
                    yield from walk_stmt(stmt, kind)
            else:
                yield from walk_stmt(child, kind)

    def walk_stmt(node: ast.AST, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, kind
        inner = (
            "function"
            if kind == "top" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            else kind
        )
        yield from walk(node, inner)

    yield from walk(tree, "top")


def import_graph(root: Path, package: str) -> tuple[set[str], list[Edge]]:
    """The modules of ``package`` (its sources under ``root``) and the imports among them."""
    modules = _modules(root, package)
    edges: list[Edge] = []

    def known(name: str) -> str | None:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name if name in modules else None

    for source, path in modules.items():
        own_package = source if path.name == "__init__.py" else source.rsplit(".", 1)[0]

        def add(target: str | None, kind: str, line: int, source: str = source) -> None:
            if target is None or target == source:
                return
            edges.append(Edge(source, target, kind, line))
            if kind == "typing":
                return  # nothing runs
            # Importing a submodule from outside its package runs the package's __init__.
            parent = target.rsplit(".", 1)[0]
            while parent != package and not (source == parent or source.startswith(parent + ".")):
                edges.append(Edge(source, parent, "package", line))
                parent = parent.rsplit(".", 1)[0]

        for node, kind in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == package or alias.name.startswith(package + "."):
                        add(known(alias.name), kind, node.lineno)
                continue
            if node.level:
                base = own_package.split(".")[: len(own_package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not (module == package or module.startswith(package + ".")):
                continue
            names = [f"{module}.{a.name}" for a in node.names]
            submodules = [n for n in names if n in modules]
            for name in submodules:
                add(name, kind, node.lineno)
            if len(submodules) < len(names):
                add(known(module), kind, node.lineno)
    return set(modules), edges


def cycles(modules: set[str], edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), largest first."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(modules):
        if v not in index:
            connect(v)
    return sorted(found, key=len, reverse=True)


def read_layers(text: str, package: str) -> list[tuple[str, list[str]]]:
    """The layer table of docs/architecture.md, lowest layer first: ``(name, patterns)``.

    A row is ``| N | name | `mod`, `pkg/`, ... | what it owns |``; ``pkg/`` stands for a
    package and everything in it.
    """
    rows = []
    for line in text.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|([^|]*)\|", line)
        if m:
            patterns = [
                f"{package}.{p.rstrip('/')}" + ("/" if p.endswith("/") else "") if p != package else p
                for p in re.findall(r"`([^`]+)`", m[3])
            ]
            rows.append((int(m[1]), m[2], patterns))
    rows.sort()
    assert [n for n, _, _ in rows] == list(range(1, len(rows) + 1)), "layers are numbered 1, 2, ... from the bottom"
    return [(name, patterns) for _, name, patterns in rows]


def assign(modules: set[str], layers: list[tuple[str, list[str]]]) -> tuple[dict[str, int], list[str]]:
    """Each module's layer number, and what is wrong with the table (unplaced, twice placed, stale)."""
    where: dict[str, list[int]] = defaultdict(list)
    problems = []
    for number, (name, patterns) in enumerate(layers, start=1):
        for pattern in patterns:
            bare = pattern.rstrip("/")
            hits = [m for m in modules if m == bare or (pattern.endswith("/") and m.startswith(bare + "."))]
            if not hits:
                problems.append(f"layer {number} ({name}) names {pattern!r}, which is no module")
            for m in hits:
                where[m].append(number)
    for m in sorted(modules):
        if not where[m]:
            problems.append(f"{m} is in no layer: add it to the table in docs/architecture.md")
        elif len(where[m]) > 1:
            problems.append(f"{m} is in layers {where[m]}")
    return {m: n[0] for m, n in where.items() if n}, problems


def upward(edges: list[Edge], layer_of: Mapping[str, int]) -> list[str]:
    return sorted(
        {
            f"{e.source} (layer {layer_of[e.source]}) imports {e.target} (layer {layer_of[e.target]}), line {e.line}"
            for e in edges
            if e.source in layer_of and e.target in layer_of and layer_of[e.source] < layer_of[e.target]
        }
    )


def oversized(roots: Iterable[Path], limit: int) -> list[str]:
    """``<file>: <n> lines`` for every Python file under ``roots`` of more than ``limit`` lines."""
    return sorted(
        f"{path}: {n} lines"
        for root in roots
        if root.is_dir()
        for path in root.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > limit
    )


MODULES, EDGES = import_graph(PACKAGE, "rl_lustre")
RUNTIME = [e for e in EDGES if e.kind != "typing"]


def test_no_import_cycle_counting_what_runs() -> None:
    found = cycles(MODULES, RUNTIME)
    assert found == [], "runtime import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_large_cycle_counting_type_hints() -> None:
    found = cycles(MODULES, EDGES)
    assert all(len(c) <= MAX_TYPING_CYCLE for c in found), (
        f"cycles over {MAX_TYPING_CYCLE} modules counting TYPE_CHECKING imports: "
        + "; ".join(", ".join(c) for c in found if len(c) > MAX_TYPING_CYCLE)
    )


def test_every_module_has_one_layer_and_imports_only_downwards() -> None:
    layers = read_layers(ARCHITECTURE.read_text(), "rl_lustre")
    layer_of, problems = assign(MODULES, layers)
    assert problems == []
    assert upward(EDGES, layer_of) == []


def test_lower_layers_never_name_the_public_classes() -> None:
    """Below the façade, code takes specs (rl_lustre.spec), never Cluster, GRPOJob or LustreVolume."""
    layers = read_layers(ARCHITECTURE.read_text(), "rl_lustre")
    layer_of, _ = assign(MODULES, layers)
    facade = {"rl_lustre.cluster", "rl_lustre.job", "rl_lustre.volume"}
    top = min(layer_of[m] for m in facade)
    assert {layer_of[m] for m in facade} == {top}
    below = sorted(f"{e.source}:{e.line}" for e in EDGES if e.target in facade and layer_of[e.source] < top)
    assert below == []


def test_the_checks_find_a_cycle_an_upward_import_and_an_unplaced_module(tmp_path: Path) -> None:
    pkg = tmp_path / "demo"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .top import Top\n")
    (pkg / "top.py").write_text("from .low import base\nclass Top: ...\n")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "base.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..top import Top\n"
        "def f():\n    from . import helper\n"
    )
    (pkg / "low" / "helper.py").write_text("import demo.low.base\n")
    (pkg / "stray.py").write_text("")
    modules, edges = import_graph(pkg, "demo")
    kinds = {(e.source, e.target, e.kind) for e in edges}
    assert ("demo.low.base", "demo.top", "typing") in kinds
    assert ("demo.low.base", "demo.low.helper", "function") in kinds
    assert ("demo.top", "demo.low", "package") in kinds  # from .low import base runs low/__init__
    assert cycles(modules, [e for e in edges if e.kind != "typing"]) == [["demo.low.base", "demo.low.helper"]]
    assert cycles(modules, edges)[0] == ["demo.low.base", "demo.low.helper", "demo.top"]
    layers = read_layers("| 2 | top | `demo`, `top` | |\n| 1 | low | `low/`, `gone` | |\n", "demo")
    layer_of, problems = assign(modules, layers)
    assert problems == [
        "layer 1 (low) names 'demo.gone', which is no module",
        "demo.stray is in no layer: add it to the table in docs/architecture.md",
    ]
    assert upward(edges, layer_of) == ["demo.low.base (layer 1) imports demo.top (layer 2), line 3"]


def test_no_module_is_longer_than_a_newcomer_reads_in_one_sitting() -> None:
    assert oversized(SIZED, MAX_MODULE_LINES) == [], (
        f"split these by concept (docs/architecture.md); keep new modules well under {MAX_MODULE_LINES} lines"
    )


def test_the_size_check_finds_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "at_the_limit.py").write_text("x = 1\n" * 600)
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * 601)
    (tmp_path / "notes.txt").write_text("x\n" * 1000)
    assert oversized([tmp_path, tmp_path / "absent"], 600) == [f"{tmp_path / 'sub' / 'long.py'}: 601 lines"]


# -- One fact in one place ----------------------------------------------------------------
# Facts about the systems we drive, each spelt once, in its home module; the rest of the
# package imports the name. Only the package's own modules are read, the fakes
# (rl_lustre/testing/) apart: they model GKE and KubeRay from the outside (plan keys,
# below, are ours: the fakes import them too).
FACTS: dict[str, tuple[str, str]] = {
    # fact: (its home, the name to import from there)
    "nvidia.com/gpu": ("catalog.py", "GPU_RESOURCE"),
    "lustre.csi.storage.gke.io": ("catalog.py", "LUSTRE_CSI_DRIVER"),
    "cloud.google.com/gke-nodepool": ("catalog.py", "GKE_NODEPOOL_LABEL"),
    "cloud.google.com/gke-accelerator": ("catalog.py", "GKE_ACCELERATOR_LABEL"),
    "cloud.google.com/gke-spot": ("catalog.py", "GKE_SPOT_LABEL"),
    "cloud.google.com/gke-ephemeral-storage-local-ssd": ("catalog.py", "GKE_LOCAL_SSD_LABEL"),
    "-head-svc": ("naming.py", "head_service_of"),
    "<redacted>": ("_secrets.py", "REDACTED"),
    "training_info.json": ("oncluster/nemo_formats.py", "TRAINING_INFO"),
    "Saving checkpoint for": ("oncluster/nemo_formats.py", "SAVE_LINE / save_line"),
    " Step (": ("oncluster/nemo_formats.py", "STEP_HEADER"),
    # Read by up() (kube/readiness.py) and by the supervisor on the head alike.
    "node.gke.io/machine-termination-datetime": ("oncluster/nodeends.py", "TERMINATION_ANNOTATION"),
}
# Spelt as a whole string only (an f-string's piece after the cluster's name).
WHOLE_FACTS: dict[str, tuple[str, str]] = {"-lustre": ("naming.py", "default_volume_name")}
# Plan keys (the nodes of a plan): each spelt in rl_lustre/plankeys.py only, as a whole string
# or an f-string's piece ("rdma-subnet-"), the fakes included: a fake that names a plan node
# imports its key. Read from the module, so a key added there is guarded at once. Where a key
# is also the spelling of another fact (the GKE node pool named "gpu-pool", the preload image's
# role label, the Ray head's container), that fact's home may spell it too. "network",
# "subnet", "lustre", "pv", "pvc" and "secret" are also ordinary words and API field names:
# they are constants in plankeys.py like the rest, but not checked here.
_KEY_WORDS = {"network", "subnet", "lustre", "pv", "pvc", "secret"}
_ALSO_SPELT_BY = {
    "gpu-pool": ("naming.py",),  # gpu_pool_name: the GKE node pool's name
    "gpu-standby": ("naming.py",),  # gpu_standby_pool_name
    "preload-image": ("catalog.py",),  # ROLE_PRELOAD_IMAGE: a label value on the cached disk image
    "ray-head": ("kube/raycluster.py",),  # the head pod's container name
}
PLAN_KEY_FACTS: dict[str, tuple[tuple[str, ...], str]] = {
    **{
        value: (("plankeys.py", *_ALSO_SPELT_BY.get(value, ())), name)
        for name in plankeys.__all__
        if name.endswith("_KEY") and (value := getattr(plankeys, name)) not in _KEY_WORDS
    },
    **{
        maker(0).removesuffix("0"): (("plankeys.py",), maker.__name__)
        for maker in (plankeys.rdma_subnet_key, plankeys.netparams_key, plankeys.podnet_key)
    },
}
# A checkpoint directory's name built by hand: "...step_" followed by a number (f"step_{n}").
_STEP_NAME = re.compile(r"(?:^|[^A-Za-z0-9_])(?:tmp_|old_)?step_$")


def _docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def spelt_twice(root: Path, skip: Iterable[str] = ("testing",)) -> list[str]:
    """Where a module under ``root`` spells a fact of :data:`FACTS` outside its home, or
    builds a checkpoint directory's name by hand (docstrings apart); and where any module,
    those in ``skip`` too, spells a plan key outside its homes (:data:`PLAN_KEY_FACTS`)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
                continue
            key = PLAN_KEY_FACTS.get(node.value)
            if key is not None and rel not in key[0]:
                found.append(
                    f"{rel}:{node.lineno} spells plan key {node.value!r}: import {key[1]} from rl_lustre/plankeys.py"
                )
            if rel.split("/")[0] in skip:
                continue
            for fact, (home, name) in FACTS.items():
                if fact in node.value and rel != home:
                    found.append(f"{rel}:{node.lineno} spells {fact!r}: import {name} from rl_lustre/{home}")
            whole = WHOLE_FACTS.get(node.value)
            if whole is not None and rel != whole[0]:
                found.append(f"{rel}:{node.lineno} spells {node.value!r}: import {whole[1]} from rl_lustre/{whole[0]}")
            if _STEP_NAME.search(node.value) and rel != "oncluster/nemo_formats.py":
                found.append(
                    f"{rel}:{node.lineno} builds a checkpoint name: use oncluster/nemo_formats.py's checkpoint_name"
                )
    return found


def test_every_fact_is_spelt_in_one_place() -> None:
    assert spelt_twice(PACKAGE) == []


def test_the_fact_check_finds_a_second_spelling(tmp_path: Path) -> None:
    (tmp_path / "testing").mkdir()
    (tmp_path / "catalog.py").write_text('"""nvidia.com/gpu in a docstring."""\nGPU_RESOURCE = "nvidia.com/gpu"\n')
    (tmp_path / "pods.py").write_text(
        '"""Pods: ``nvidia.com/gpu``."""\nlimits = {"nvidia.com/gpu": 8}\n'
        "def name(n):\n"
        '    return f"{n}-head-svc", f"tmp_step_{n}", "total_step_time", f"{n}-lustre", "firewall-lustre"\n'
    )
    (tmp_path / "testing" / "fake.py").write_text('limits = {"nvidia.com/gpu": 8}\nwaits = ("gke-cluster",)\n')
    (tmp_path / "plankeys.py").write_text('GPU_POOL_KEY = "gpu-pool"\n')
    (tmp_path / "naming.py").write_text('def gpu_pool_name():\n    return "gpu-pool"\n')
    (tmp_path / "plan.py").write_text(
        '"""The "gke-cluster" node."""\n'
        'deps = ("gke-cluster", "gpu-pool", "network", "gke-cluster, as its pool")\n'
        'subnets = [f"rdma-subnet-{i}" for i in range(8)]\n'
    )
    assert spelt_twice(tmp_path) == [
        "plan.py:2 spells plan key 'gke-cluster': import GKE_CLUSTER_KEY from rl_lustre/plankeys.py",
        "plan.py:2 spells plan key 'gpu-pool': import GPU_POOL_KEY from rl_lustre/plankeys.py",
        "plan.py:3 spells plan key 'rdma-subnet-': import rdma_subnet_key from rl_lustre/plankeys.py",
        "pods.py:2 spells 'nvidia.com/gpu': import GPU_RESOURCE from rl_lustre/catalog.py",
        "pods.py:4 spells plan key 'firewall-lustre': import FIREWALL_LUSTRE_KEY from rl_lustre/plankeys.py",
        "pods.py:4 spells '-head-svc': import head_service_of from rl_lustre/naming.py",
        "pods.py:4 builds a checkpoint name: use oncluster/nemo_formats.py's checkpoint_name",
        "pods.py:4 spells '-lustre': import default_volume_name from rl_lustre/naming.py",
        "testing/fake.py:2 spells plan key 'gke-cluster': import GKE_CLUSTER_KEY from rl_lustre/plankeys.py",
    ]
