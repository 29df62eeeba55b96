"""Ownership: which remote resources rl_lustre may adopt and delete.

A resource is ours when it carries ``managed-by=rl-lustre`` and the deployment's
``rl-lustre-deployment`` label. Compute networks, subnetworks, addresses and firewall
rules have no labels here, so the same pairs are written into their description.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Generic, TypeVar

import attrs

from ..catalog import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY, ownership_labels
from ..errors import OwnershipError

T = TypeVar("T")

_PAIR = re.compile(r"(?:^|\s)([a-z][a-z0-9_-]*)=([a-z0-9_-]*)(?=\s|$)")


@attrs.frozen
class Ensured(Generic[T]):
    """What an adapter's ``create`` did.

    Attributes:
        name: the resource's full name.
        adopted: True when it already existed with our labels and nothing was created.
        resource: the resource as last read (or as requested, for a create not awaited).
    """

    name: str
    adopted: bool
    resource: T


def describe_ownership(deployment: str, text: str = "") -> str:
    """A Compute description recording our labels, optionally after free ``text``.

    Examples:
        >>> describe_ownership("demo", "Lustre traffic")
        'Lustre traffic [managed-by=rl-lustre rl-lustre-deployment=demo]'
    """
    pairs = " ".join(f"{k}={v}" for k, v in ownership_labels(deployment).items())
    return f"{text} [{pairs}]" if text else f"[{pairs}]"


def labels_from_description(description: str | None) -> dict[str, str]:
    """The ``key=value`` pairs inside the last ``[...]`` of a Compute description.

    Examples:
        >>> labels_from_description("Lustre traffic [managed-by=rl-lustre rl-lustre-deployment=demo]")
        {'managed-by': 'rl-lustre', 'rl-lustre-deployment': 'demo'}
        >>> labels_from_description("made by hand")
        {}
    """
    if not description:
        return {}
    m = re.search(r"\[([^\[\]]*)\]\s*$", description)
    return dict(_PAIR.findall(m.group(1))) if m else {}


# Server-side list filters that select what carries our labels (each adapter also checks
# the labels it gets back: nothing is treated as ours on the server's word alone).
LABELS_FILTER = f'labels.{LABEL_MANAGED_BY} = "{MANAGED_BY}"'
DESCRIPTION_FILTER = f'description eq ".*{LABEL_MANAGED_BY}={MANAGED_BY}.*"'


def is_ours(labels: Mapping[str, str], deployment: str | None = None) -> bool:
    """Whether ``labels`` mark a resource as rl_lustre's (and, if given, ``deployment``'s).

    Examples:
        >>> is_ours({"managed-by": "rl-lustre", "rl-lustre-deployment": "demo"}, "demo")
        True
        >>> is_ours({"managed-by": "someone-else"}), is_ours({"managed-by": "rl-lustre"})
        (False, False)
    """
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or not labels.get(LABEL_DEPLOYMENT):
        return False
    return deployment is None or labels.get(LABEL_DEPLOYMENT) == deployment


def check_owned(kind: str, name: str, labels: Mapping[str, str], deployment: str) -> None:
    """Raise unless ``labels`` mark the resource as belonging to ``deployment``.

    Examples:
        >>> check_owned("GKE cluster", "demo", {"managed-by": "rl-lustre",
        ...             "rl-lustre-deployment": "demo"}, "demo")
        >>> check_owned("GKE cluster", "demo", {}, "demo")  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        rl_lustre.errors.OwnershipError: GKE cluster demo exists but was not created by rl_lustre (it lacks the label
        managed-by=rl-lustre); rl_lustre never adopts or deletes it. Delete or rename it yourself, or choose another
        name.
    """
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
        raise OwnershipError(
            f"{kind} {name} exists but was not created by rl_lustre (it lacks the label "
            f"{LABEL_MANAGED_BY}={MANAGED_BY}); rl_lustre never adopts or deletes it. "
            "Delete or rename it yourself, or choose another name."
        )
    theirs = labels.get(LABEL_DEPLOYMENT)
    if theirs != deployment:
        raise OwnershipError(
            f"{kind} {name} belongs to rl_lustre deployment {theirs!r}, not {deployment!r}; "
            "it is neither adopted nor deleted. Use that deployment, or choose another name."
        )
