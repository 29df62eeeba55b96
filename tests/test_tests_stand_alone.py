"""Tests stand alone: no test module imports another test module.

What tests share lives in the ``tests/helpers`` package (or in ``conftest.py`` fixtures), so a
test module can be read, moved or deleted without breaking another one. Imports are read from
the sources with ``ast`` (top level, inside functions, under ``if TYPE_CHECKING:``), in every
``.py`` file under ``tests/``, helpers included.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_test_module(name: str) -> bool:
    """A test module by pytest's default naming (``test_*.py`` or ``*_test.py``)."""
    return name.startswith("test_") or name.endswith("_test")


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names ``node`` imports: ``a.b`` for ``import a.b`` and ``from a import b``
    alike (``b`` may be a module), with the dots of a relative import kept in front."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = "." * node.level + (node.module or "")
    return [base, *(f"{base}.{alias.name}" if node.module else base + alias.name for alias in node.names)]


def imports_of_test_modules(root: Path) -> list[str]:
    """Every import under ``root`` of a test module, as ``path:line: import``, sorted.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "test_b.py").write_text("from test_a import thing\\nimport attrs\\n")
        ...     imports_of_test_modules(Path(d))
        ['test_b.py:1: test_a']
    """
    found: list[tuple[Path, int, str]] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _imported(node):
                if any(_is_test_module(part) for part in name.lstrip(".").split(".") if part):
                    found.append((path.relative_to(root), node.lineno, name))
                    break
    return [f"{path}:{line}: {name}" for path, line, name in sorted(found)]


def test_no_imports_of_test_modules_another_test_module() -> None:
    found = imports_of_test_modules(TESTS)
    assert found == [], (
        "a test module is imported (move what is shared into tests/helpers/ and import it from there):\n"
        + "\n".join(found)
    )


def test_the_check_finds_every_way_of_importing_a_test_module(tmp_path: Path) -> None:
    """The check is no tautology: in a tests tree of its own, each spelling of such an import
    is found, in a test module and in a helper, at the top and inside a function; what a test
    may import (helpers, the package, ``rl_lustre.testing``) is not."""
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "shared.py").write_text("from . import test_in_helpers\n")
    (tmp_path / "test_clean.py").write_text(
        textwrap.dedent("""
            import pytest
            from helpers.shared import thing
            from helpers import shared
            from rl_lustre.testing import FakeGCP
            import rl_lustre.testing.kube
            latest_test = 1
        """)
    )
    (tmp_path / "test_leaning.py").write_text(
        textwrap.dedent("""
            import test_a
            from test_b import helper
            from tests.test_c import helper
            import tests.test_d
            from tests import test_e
            from .test_f import helper
            from . import test_g


            def later() -> None:
                from test_h import helper
        """)
    )
    (tmp_path / "x_test.py").write_text("import other_test\n")

    assert imports_of_test_modules(tmp_path) == [
        "helpers/shared.py:1: .test_in_helpers",
        "test_leaning.py:2: test_a",
        "test_leaning.py:3: test_b",
        "test_leaning.py:4: tests.test_c",
        "test_leaning.py:5: tests.test_d",
        "test_leaning.py:6: tests.test_e",
        "test_leaning.py:7: .test_f",
        "test_leaning.py:8: .test_g",
        "test_leaning.py:12: test_h",
        "x_test.py:1: other_test",
    ]
