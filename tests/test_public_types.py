"""Public signatures say what they take: no ``Any`` where a type exists, and mypy --strict.

What a user reads in the reference (the exported classes' constructors, fields and documented
methods, the exported functions) names real types. ``Any`` is left in two places only: a
JSON document (``dict[str, Any]``, ``Mapping[str, Any]``: its values are whatever JSON
holds, as ``json.loads`` types them) and the few signatures in :data:`EXCEPTIONS`, each with
its reason. ``nox -s typecheck`` holds the files that define the public surface to
``mypy --strict`` (``STRICT`` in noxfile.py); the last test checks that list is complete.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
JSON = re.compile(r"\b(?:dict|Mapping)\[str, Any\]")
ANY = re.compile(r"\bAny\b")
EXCEPTIONS = {
    ("rl_lustre.Cluster.local", "kwargs"): "forwarded to Cluster(...), whose signature types each field",
    ("rl_lustre.LustreSizing.volume", "kwargs"): "forwarded to LustreVolume(...), whose signature types each field",
    ("rl_lustre.testing.FakeGCP.bucket_content", "return"): "the JSON an upload wrote: any JSON value",
}


def _annotations(obj: object) -> Iterator[tuple[str, str]]:
    """``(parameter or "return", annotation)`` of a callable's signature."""
    try:
        signature = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return
    for name, parameter in signature.parameters.items():
        if parameter.annotation is not inspect.Parameter.empty:
            yield name, str(parameter.annotation)
    if signature.return_annotation is not inspect.Signature.empty:
        yield "return", str(signature.return_annotation)


def public_signatures() -> Iterator[tuple[str, str, str]]:
    """``(path, parameter, annotation)`` of everything the reference shows a user."""
    for module_name in ("rl_lustre", "rl_lustre.testing"):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            path = f"{module_name}.{name}"
            if inspect.isfunction(obj):
                for parameter, annotation in _annotations(obj):
                    yield path, parameter, annotation
            if not inspect.isclass(obj):
                continue
            for parameter, annotation in _annotations(obj):
                yield path, parameter, annotation
            if attrs.has(obj):
                for field in attrs.fields(obj):
                    if not field.name.startswith("_") and field.type is not None:
                        yield f"{path}.{field.name}", "field", str(field.type)
            for member, value in inspect.getmembers(obj):
                if member.startswith("_"):
                    continue
                functions = [value.fget, value.fset] if isinstance(value, property) else [value]
                for function in functions:
                    # The documented members: what the reference shows (undocumented ones it hides).
                    if callable(function) and inspect.getdoc(function) and not inspect.isclass(function):
                        for parameter, annotation in _annotations(function):
                            yield f"{path}.{member}", parameter, annotation


def test_public_signatures_name_real_types() -> None:
    found = [
        f"{path}({parameter}: {annotation})"
        for path, parameter, annotation in public_signatures()
        if ANY.search(JSON.sub("JSON", annotation)) and (path, parameter) not in EXCEPTIONS
    ]
    assert not found, "Any in a public signature (give the type):\n" + "\n".join(sorted(set(found)))


def test_the_exceptions_are_still_there() -> None:
    seen = {(path, parameter) for path, parameter, annotation in public_signatures() if ANY.search(annotation)}
    assert set(EXCEPTIONS) <= seen, set(EXCEPTIONS) - seen


def test_the_signatures_the_issue_named_are_typed() -> None:
    import rl_lustre

    hints = {p: a for path, p, a in public_signatures() if path == "rl_lustre.Cluster.goodput"}
    assert hints["since"] == "Instant | None"
    hints = {p: a for path, p, a in public_signatures() if path == "rl_lustre.Cluster.metrics"}
    assert (hints["start"], hints["monitoring"]) == ("When | None", "Monitoring | None")
    hints = {p: a for path, p, a in public_signatures() if path == "rl_lustre.LustreVolume.import_data"}
    assert hints["return"] == "TransferResult"
    init = inspect.signature(rl_lustre.Cluster).parameters
    assert (str(init["secrets"].annotation), str(init["labels"].annotation)) == ("Iterable[str]", "Mapping[str, str]")


def test_every_module_defining_a_public_name_is_held_to_mypy_strict() -> None:
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    strict = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "STRICT" for t in node.targets)
    )
    for module_name in ("rl_lustre", "rl_lustre.testing"):
        module = importlib.import_module(module_name)
        homes = {h if isinstance(h, str) else h[0] for h in module._HOMES.values()}
        for home in homes:
            path = importlib.import_module(home, module_name).__file__
            assert path is not None
            relative = str(Path(path).relative_to(ROOT))
            if relative == "rl_lustre/gcp/lustre.py":  # an adapter: its only public part is TransferResult
                continue
            assert relative in strict, f"{relative} defines a public name: add it to STRICT in noxfile.py"
        assert str(Path(module.__file__).relative_to(ROOT)) in strict
