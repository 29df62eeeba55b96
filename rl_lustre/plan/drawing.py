"""The plan's dependency graph drawn as text, computed from the plan (:meth:`Plan.graph`).

The graph is drawn as a tree: each node sits under the dependency it waits for longest
(the deepest one; of equals, the first it lists), and ``+ a, b`` names the others it
waits for. So every edge of the plan is shown once, and a branch that does not wait for
another (the Lustre instance and the GKE cluster) is drawn apart from it.

Families of nodes that differ only by a trailing number and are wired alike (the RoCE
subnets ``rdma-subnet-0`` ... ``rdma-subnet-7``, their GKENetworkParamSets and pod
networks) are folded into one line, ``rdma-subnet-0..7``; a family under a family of the
same size waits member by member (``podnet-rdma-3`` for ``netparams-rdma-3``).

Nodes ``up()`` does not create are marked: ``[use]`` (yours, used as it is) and
``[cache]`` (made when missing, kept after ``down()``).
"""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from .graph import Plan

__all__ = ["MAX_WIDTH", "draw"]

MAX_WIDTH = 120
_NUMBERED = re.compile(r"(.*?)(\d+)")


@attrs.frozen
class _Unit:
    """One line of the drawing: a node, or a folded family of nodes."""

    label: str
    keys: tuple[str, ...]
    action: str
    deps: tuple[str, ...]  # labels of the units it waits for, in the order it lists them


def _label(prefix: str, numbers: list[int]) -> str:
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{prefix}{numbers[0]}..{numbers[-1]}"
    return f"{prefix}{{{','.join(map(str, numbers))}}}"


def _units(plan: Plan) -> list[_Unit]:
    """The plan's nodes with the families folded, in plan order."""
    numbered = {r.key: (m[1], int(m[2])) for r in plan if (m := _NUMBERED.fullmatch(r.key))}
    candidates: dict[tuple[str, str, str], list[str]] = {}
    for r in plan:
        if r.key in numbered:
            candidates.setdefault((numbered[r.key][0], r.kind, r.action), []).append(r.key)

    def shape(key: str) -> tuple[str, ...]:
        """The node's dependencies, with a dependency numbered like the node written as
        its family's prefix: alike for every member of a family wired alike."""
        number = numbered[key][1]
        return tuple(
            numbered[d][0] + "*" if d in numbered and numbered[d][1] == number else d for d in plan.get(key).depends_on
        )

    families = [keys for keys in candidates.values() if len(keys) > 1 and len({shape(k) for k in keys}) == 1]
    while True:
        family_of = {key: tuple(keys) for keys in families for key in keys}
        broken = _misread(plan, family_of, numbered)
        if not broken:
            break
        families = [keys for keys in families if tuple(keys) not in broken]
    label_of = {r.key: r.key for r in plan}
    for keys in families:
        label_of.update(dict.fromkeys(keys, _label(numbered[keys[0]][0], sorted(numbered[k][1] for k in keys))))
    units: dict[str, _Unit] = {}
    for r in plan:
        label = label_of[r.key]
        if label in units:
            units[label] = attrs.evolve(units[label], keys=(*units[label].keys, r.key))
            continue
        deps = tuple(dict.fromkeys(label_of[d] for d in r.depends_on))
        units[label] = _Unit(label, (r.key,), r.action, deps)
    return list(units.values())


def _misread(
    plan: Plan, family_of: dict[str, tuple[str, ...]], numbered: dict[str, tuple[str, int]]
) -> set[tuple[str, ...]]:
    """The families whose folded line would misstate an edge.

    A folded line reads one way only: a node that names a family waits for every member;
    a family that names a node waits for it in every member (the fold ensures that); a
    family that names a family of the same numbers waits member by member, each member
    for its namesake only.
    """
    broken: set[tuple[str, ...]] = set()
    for r in plan:
        mine = family_of.get(r.key)
        for d in r.depends_on:
            theirs = family_of.get(d)
            if mine is None and theirs is not None:
                ok = set(theirs) <= set(r.depends_on)
            elif mine is not None and d in numbered and numbered[d][1] == numbered[r.key][1]:
                ok = (
                    theirs is not None
                    and sorted(numbered[k][1] for k in theirs) == sorted(numbered[k][1] for k in mine)
                    and len(set(theirs) & set(r.depends_on)) == 1
                )
            else:
                ok = theirs is None
            if not ok:
                broken |= {f for f in (mine, theirs) if f is not None}
    return broken


def draw(plan: Plan) -> str:
    """The plan's dependency graph as a tree of text lines (see the module's docstring).

    Examples:
        >>> from rl_lustre import Cluster
        >>> print(draw(Cluster.local("demo", volume_dir="/tmp/v").plan()))
        volume-dir [use]
        └─ ray-head
    """
    units = _units(plan)
    depth: dict[str, int] = {}
    for u in units:
        depth[u.label] = 1 + max((depth[d] for d in u.deps), default=-1)
    children: dict[str | None, list[_Unit]] = {}
    parent: dict[str, str | None] = {}
    for u in units:
        deepest = max((depth[d] for d in u.deps), default=None)
        parent[u.label] = next((d for d in u.deps if depth[d] == deepest), None)
        children.setdefault(parent[u.label], []).append(u)

    lines: list[str] = []

    def walk(u: _Unit, lead: str, branch: str, more: str) -> None:
        text = u.label + ("" if u.action == "create" else f" [{u.action}]")
        also = [d for d in u.deps if d != parent[u.label]]
        if also:
            text += "  + " + ", ".join(also)
        first = lead + branch
        rest = lead + more + ("│  " if children.get(u.label) else "   ") + "    "
        lines.extend(
            textwrap.wrap(
                text,
                MAX_WIDTH,
                initial_indent=first,
                subsequent_indent=rest,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
        kids = children.get(u.label, [])
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            walk(kid, lead + more, "└─ " if last else "├─ ", "   " if last else "│  ")

    for root in children.get(None, []):
        walk(root, "", "", "")
    return "\n".join(lines)
