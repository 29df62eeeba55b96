"""The public surface has an edge: the docs, the README and the examples use public names only.

The rule (docs/architecture.md, "The public surface"): the public API is exactly what
``rl_lustre``, ``rl_lustre.errors`` and ``rl_lustre.testing`` export in ``__all__``; every
other module is internal, whatever its name. So a page or an example that imports from
another module (``from rl_lustre.plan import Plan``, ``import rl_lustre.cost``) or names a
deep path (``rl_lustre.goodput.GoodputLedger``, ``::: rl_lustre.sweep.Outcome``) teaches
users an internal path, and fails here. A logger's name is not an import: it is written
as ``logger `rl_lustre.outages``` and must be a logger the package logs to. The one page
exempt is docs/architecture.md, the contributors' map of the internals.

The reference pages are built from the public objects' docstrings: those name a public
object by its public path (``rl_lustre.CheckReport``, not ``rl_lustre.check.CheckReport``).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import rl_lustre
from rl_lustre._public import PUBLIC_MODULES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rl_lustre"
# The contributors' map of the internals: it names them on purpose.
EXEMPT = {ROOT / "docs" / "architecture.md"}

_FROM = re.compile(r"^[ \t>]*from[ \t]+(rl_lustre(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)", re.M)
_IMPORT = re.compile(r"^[ \t>]*import[ \t]+([^\n#]*)", re.M)
_PATH = re.compile(r"(?<![\w./-])rl_lustre(?:\.[A-Za-z_]\w*)+")
_LOGGER = re.compile(r"getLogger\((?:\"([\w.]+)\"|'([\w.]+)'|(__name__))\)")


def sources() -> list[Path]:
    """What users read and copy from: the README, the docs pages, the examples."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").glob("*.py"))]
    return [p for p in pages if p not in EXEMPT]


def loggers() -> set[str]:
    """The names of the loggers the package logs to."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for m in _LOGGER.finditer(path.read_text(encoding="utf-8")):
            names.add(m[1] or m[2] or module)
    return names


def _exports(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__)


def _path_problem(path: str) -> str | None:
    """Why ``rl_lustre.a.b`` is not a public path, or None."""
    parts = path.split(".")
    module = ".".join(parts[:2]) if ".".join(parts[:2]) in PUBLIC_MODULES else "rl_lustre"
    rest = parts[module.count(".") + 1 :]
    if not rest:
        return None
    if rest[0] not in _exports(module):
        return f"{module} does not export {rest[0]!r}: an internal path"
    obj = getattr(importlib.import_module(module), rest[0])
    for attribute in rest[1:]:
        if not hasattr(obj, attribute):
            return f"{'.'.join([module, *rest[: rest.index(attribute)]])} has no attribute {attribute!r}"
        obj = getattr(obj, attribute)
    return None


def _names(imported: str) -> Iterator[str]:
    for item in imported.strip("()").replace("\n", " ").split(","):
        if item.strip():
            yield item.split()[0]


def problems(text: str, logger_names: set[str]) -> list[str]:
    """Every import of, or reference to, a non-public path in ``text``, with the reason."""
    found = []
    for m in _FROM.finditer(text):
        module = m[1]
        if module not in PUBLIC_MODULES:
            found.append(f"from {module} import ...: {module} is internal")
            continue
        for name in _names(m[2]):
            if name not in _exports(module):
                found.append(f"from {module} import {name}: {module} does not export it")
    for m in _IMPORT.finditer(text):
        for module in _names(m[1]):
            if module.startswith("rl_lustre.") and module not in PUBLIC_MODULES:
                found.append(f"import {module}: {module} is internal")
    for m in _PATH.finditer(text):
        path = m[0]
        if text[: m.start()].endswith("logger `"):
            if path not in logger_names:
                found.append(f"logger `{path}`: the package logs to no such logger")
            continue
        why = _path_problem(path)
        if why is not None:
            found.append(f"{path}: {why}")
    return found


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_and_examples_use_public_names_only(path: Path) -> None:
    found = problems(path.read_text(encoding="utf-8"), loggers())
    assert not found, f"{path.relative_to(ROOT)} names internal paths (use rl_lustre.<Name>):\n" + "\n".join(found)


def test_the_check_catches_deep_imports_and_paths_and_passes_public_ones() -> None:
    deep = """
```python
from rl_lustre.plan import Plan
from rl_lustre.testing._kube_kinds import (KindInfo,
    register_kind)
import rl_lustre.goodput
from rl_lustre import Cluster, build_plan
```
The ledger is a `rl_lustre.goodput.GoodputLedger`; see `rl_lustre.Cluster.no_such_method`.
::: rl_lustre.sweep.Outcome
Lanes are logged by logger `rl_lustre.no_such_logger`.
"""
    assert problems(deep, loggers()) == [
        "from rl_lustre.plan import ...: rl_lustre.plan is internal",
        "from rl_lustre.testing._kube_kinds import ...: rl_lustre.testing._kube_kinds is internal",
        "from rl_lustre import build_plan: rl_lustre does not export it",
        "import rl_lustre.goodput: rl_lustre.goodput is internal",
        "rl_lustre.plan: rl_lustre does not export 'plan': an internal path",
        "rl_lustre.testing._kube_kinds: rl_lustre.testing does not export '_kube_kinds': an internal path",
        "rl_lustre.goodput: rl_lustre does not export 'goodput': an internal path",
        "rl_lustre.goodput.GoodputLedger: rl_lustre does not export 'goodput': an internal path",
        "rl_lustre.Cluster.no_such_method: rl_lustre.Cluster has no attribute 'no_such_method'",
        "rl_lustre.sweep.Outcome: rl_lustre does not export 'sweep': an internal path",
        "logger `rl_lustre.no_such_logger`: the package logs to no such logger",
    ]
    public = """
```python
import rl_lustre
from rl_lustre import (Cluster, GRPOJob as Job,
                       Plan)
from rl_lustre.errors import ConfigError
from rl_lustre.testing import FakeGCP, KindInfo
```
`rl_lustre.Cluster.local`, `rl_lustre.errors.ConfigError`, `rl_lustre.testing.preempt`, `rl_lustre.Plan`;
logged by logger `rl_lustre.outages`; the source file `rl_lustre/cli/_app.py`.
::: rl_lustre.GoodputLedger
"""
    assert problems(public, loggers()) == []


def test_every_public_module_is_importable_and_exports_what_it_lists() -> None:
    assert PUBLIC_MODULES == ("rl_lustre", "rl_lustre.errors", "rl_lustre.testing")
    for module in PUBLIC_MODULES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            assert hasattr(mod, name), f"{module}.{name}"
    assert rl_lustre.errors is importlib.import_module("rl_lustre.errors")


def _public_objects() -> dict[int, str]:
    """Each public object (by identity) and its public path."""
    return {
        id(getattr(importlib.import_module(module), name)): f"{module}.{name}"
        for module in PUBLIC_MODULES
        for name in importlib.import_module(module).__all__
    }


def _documented(obj: object) -> Iterator[object]:
    """An object, and the methods and properties of a class, whose docstrings the reference shows."""
    yield obj
    if isinstance(obj, type):
        for name, value in vars(obj).items():
            value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            value = value.fget if isinstance(value, property) else value
            if callable(value) and (not name.startswith("_") or name == "__init__"):
                yield value


def deep_paths_to_public_objects(doc: str, public: dict[int, str]) -> list[str]:
    """``rl_lustre.a.b.C`` paths in ``doc`` that reach a public object by another path."""
    found = []
    for m in _PATH.finditer(doc):
        parts = m[0].split(".")
        for i in range(len(parts), 1, -1):  # the longest importable module, then attributes
            try:
                obj: object = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for k, attribute in enumerate(parts[i:], start=i):
                obj = getattr(obj, attribute, None)
                home = public.get(id(obj))
                if home is not None and home != ".".join(parts[: k + 1]):
                    found.append(f"{m[0]}: {'.'.join(parts[: k + 1])} is {home}")
                    break
            break
    return found


def test_the_reference_docstrings_name_public_objects_by_their_public_path() -> None:
    public = _public_objects()
    found = []
    for module in ("rl_lustre", "rl_lustre.testing"):
        for name in importlib.import_module(module).__all__:
            for obj in _documented(getattr(importlib.import_module(module), name)):
                for problem in deep_paths_to_public_objects(obj.__doc__ or "", public):
                    found.append(f"{module}.{name} ({getattr(obj, '__qualname__', name)}): {problem}")
    assert not found, "\n".join(found)
    # It would catch one.
    assert deep_paths_to_public_objects("A :class:`~rl_lustre.check.CheckReport`.", public) == [
        "rl_lustre.check.CheckReport: rl_lustre.check.CheckReport is rl_lustre.CheckReport"
    ]
