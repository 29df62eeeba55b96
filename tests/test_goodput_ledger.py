"""The goodput ledger as a value: its JSON form (against a schema), its table, sums and prices."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from helpers.goodput import SCHEMA, node, preempted

from rl_lustre.goodput import CATEGORIES, GoodputLedger
from rl_lustre.goodput.ledger import build
from rl_lustre.goodput.timeline import Evidence


def test_to_dict_is_json_and_follows_the_schema_at_every_scope() -> None:
    ev = preempted()
    for ledger in (build(ev, scope="run", run="r"), build(ev), build(ev, scope="sweep", runs=["r"], name="sweep")):
        data = json.loads(json.dumps(ledger.to_dict()))
        jsonschema.validate(data, SCHEMA)
        assert list(data["categories"]) == list(CATEGORIES)
        assert data["total"]["seconds"] == pytest.approx(sum(c["seconds"] for c in data["categories"].values()))
    data = build(ev).to_dict(segments=True)
    jsonschema.validate(data, SCHEMA)
    assert sum(s["end"] - s["start"] for s in data["segments"]) == pytest.approx(data["total"]["seconds"])
    assert data["runs"][0]["restarts"][0]["steps_redone"] == 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**data, "categories": {"training": {"seconds": 1, "usd": 0}}}, SCHEMA)


def test_the_table_lists_every_category_then_the_total_and_the_restarts() -> None:
    text = str(build(preempted(), scope="run", run="r"))
    lines = text.splitlines()
    assert lines[0] == "Goodput of run r (SUCCEEDED; 3 GPU nodes × 8 GPUs)"
    rows = [line.split()[0] for line in lines[3 : 3 + len(CATEGORIES) + 1]]
    assert rows == [*CATEGORIES, "total"]
    assert "attributed 100.0% · goodput" in lines[3 + len(CATEGORIES)]
    assert lines[-1].startswith("  lost: restart 1 at ")
    assert "waited 13.0 s for GPUs, first step again after 31.0 s" in lines[-1]
    assert "segments" not in repr(build(preempted()))


def test_fractions_and_hours() -> None:
    ledger = build(preempted(), scope="run", run="r")
    assert ledger.goodput_fraction == ledger.seconds["training"] / ledger.total_seconds
    assert ledger.node_hours() == ledger.total_seconds / 3600
    assert ledger.gpu_hours("training") == pytest.approx(8 * ledger.seconds["training"] / 3600)
    empty = build(Evidence(nodes=(node("a", 10, 10, 10, 10),), runs=(), now=20))
    assert (empty.total_seconds, empty.attributed_fraction, empty.goodput_fraction) == (0, 1.0, 0.0)
    assert "nothing was billed in this window" in empty.notes
    assert isinstance(empty, GoodputLedger)
    with pytest.raises(KeyError, match="no run 'x'"):
        empty.run("x")


def test_bad_scopes_and_runs_are_refused_before_any_work() -> None:
    ev = preempted()
    with pytest.raises(Exception, match="scope"):
        build(ev, scope="galaxy")
    with pytest.raises(Exception, match="is not among the runs collected"):
        build(ev, scope="run", run="nope")


def test_the_core_takes_plain_values_and_imports_nothing_that_reads() -> None:
    import ast

    import rl_lustre.goodput as pkg

    root = Path(pkg.__file__).parent
    for name in ("__init__", "timeline", "attribute", "ledger", "recoveries"):
        tree = ast.parse((root / f"{name}.py").read_text())
        found = {("." * n.level) + (n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        found |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        allowed = {
            "__future__",
            "attrs",
            "bisect",
            "itertools",
            "math",
            "time",
            "collections",
            "collections.abc",
            "typing",
            "..errors",
            ".._public",  # names the public types by rl_lustre: no I/O
            ".timeline",
            ".attribute",
            ".ledger",
            ".recoveries",
        }
        assert found <= allowed, (name, found - allowed)
