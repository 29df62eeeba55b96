"""The list filters the fakes understand, as the real APIs read them (the subset rl_lustre sends).

- Managed Lustre ``ListInstances.filter`` (AIP-160): ``labels.KEY = "VALUE"`` terms,
  joined by ``AND`` or by spaces.
- Compute Engine ``list`` / ``aggregatedList`` ``filter``: the regular-expression form
  ``FIELD eq REGEX`` / ``FIELD ne REGEX`` (the regex must match the whole value), or
  AIP-160 terms ``FIELD = VALUE`` / ``FIELD != VALUE`` in parentheses. The two forms
  cannot be mixed, as on the real API.

Anything else is refused with INVALID_ARGUMENT / HTTP 400, so a filter the fake would
silently ignore cannot pass a test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from ._core import FakeError

_LABEL_TERM = re.compile(r'labels\.([a-z][a-z0-9_-]*)\s*=\s*"([a-z0-9_-]*)"')
_REGEX_FORM = re.compile(r"""\s*([A-Za-z][A-Za-z0-9_.]*)\s+(eq|ne)\s+(?:'([^']*)'|"([^"]*)"|(\S+))\s*""")
_AIP_TERM = re.compile(r"""\(\s*([A-Za-z][A-Za-z0-9_.-]*)\s*(=|!=)\s*(?:"([^"]*)"|(\S+?))\s*\)""")


def label_filter(expr: str) -> Callable[[Mapping[str, str]], bool]:
    """A predicate on a resource's labels for an AIP-160 filter of ``labels.KEY = "VALUE"`` terms.

    Examples:
        >>> ours = label_filter('labels.managed-by = "rl-lustre" AND labels.rl-lustre-deployment = "demo"')
        >>> ours({"managed-by": "rl-lustre", "rl-lustre-deployment": "demo"}), ours({"managed-by": "rl-lustre"})
        (True, False)
    """
    expr = expr.strip()
    if not expr:
        return lambda labels: True
    terms: list[tuple[str, str]] = []
    for part in re.split(r"\s+AND\s+|\s+(?=labels\.)", expr):
        m = _LABEL_TERM.fullmatch(part.strip())
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f'invalid filter {expr!r}: the fake understands only labels.KEY = "VALUE" terms',
            )
        terms.append((m[1], m[2]))
    return lambda labels: all(labels.get(k) == v for k, v in terms)


def _field(resource: Mapping[str, Any], path: str) -> Any:
    value: Any = resource
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def compute_filter(expr: str) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate on a Compute resource (JSON) for a ``filter`` query parameter.

    Examples:
        >>> ours = compute_filter('description eq ".*managed-by=rl-lustre.*"')
        >>> ours({"description": "x [managed-by=rl-lustre]"}), ours({"description": "by hand"}), ours({})
        (True, False, False)
        >>> compute_filter('(name = "a") (status != "DONE")')({"name": "a", "status": "RUNNING"})
        True
    """
    expr = expr.strip()
    if not expr:
        return lambda resource: True
    m = _REGEX_FORM.fullmatch(expr)
    if m is not None:
        field, op, pattern = m[1], m[2], next(g for g in m.groups()[2:] if g is not None)
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise FakeError(400, f"Invalid value for field 'filter': {expr!r} ({exc})", "invalid") from None

        def matches(resource: Mapping[str, Any]) -> bool:
            value = _field(resource, field)
            hit = value is not None and regex.fullmatch(str(value)) is not None
            return hit if op == "eq" else not hit

        return matches
    terms = _AIP_TERM.findall(expr)
    if not terms or _AIP_TERM.sub("", expr).strip():
        raise FakeError(400, f"Invalid value for field 'filter': {expr!r}", "invalid")

    def all_terms(resource: Mapping[str, Any]) -> bool:
        for field, op, quoted, bare in terms:
            value = _field(resource, field)
            want = quoted if quoted else bare
            text = str(value).lower() if isinstance(value, bool) else str(value)
            same = value is not None and text == want
            if same != (op == "="):
                return False
        return True

    return all_terms


_MONITORING_TERM = re.compile(
    r'(metric\.type|resource\.type|(?:resource|metric)\.labels\.[a-z][a-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"'
)


def monitoring_filter(expr: str) -> Callable[[str, str, Mapping[str, str], Mapping[str, str]], bool]:
    """A predicate ``(metric_type, resource_type, resource_labels, metric_labels) -> bool``
    for a Cloud Monitoring filter of ``metric.type = "..."``, ``resource.type = "..."`` and
    ``resource.labels.K = "V"`` / ``metric.labels.K = "V"`` terms joined by ``AND``;
    ``metric.type`` is required, as on the real API.

    Examples:
        >>> f = monitoring_filter('metric.type = "a/b" AND resource.type = "r" AND resource.labels.zone = "z"')
        >>> f("a/b", "r", {"zone": "z"}, {}), f("a/b", "r", {"zone": "y"}, {}), f("a/b", "q", {"zone": "z"}, {})
        (True, False, False)
    """
    terms: list[tuple[str, str]] = []
    for part in re.split(r"\s+AND\s+", expr.strip()):
        m = _MONITORING_TERM.fullmatch(part.strip())
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"invalid filter {expr!r}: the fake understands metric.type / resource.type / "
                "resource.labels.K / "
                'metric.labels.K = "VALUE" terms joined by AND',
            )
        terms.append((m[1], re.sub(r"\\(.)", r"\1", m[2])))
    if not any(field == "metric.type" for field, _ in terms):
        raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"filter {expr!r} must name a metric.type")

    def matches(metric_type: str, resource_type: str, resource: Mapping[str, str], metric: Mapping[str, str]) -> bool:
        for field, want in terms:
            if field == "metric.type":
                have: str | None = metric_type
            elif field == "resource.type":
                have = resource_type
            elif field.startswith("resource.labels."):
                have = resource.get(field.removeprefix("resource.labels."))
            else:
                have = metric.get(field.removeprefix("metric.labels."))
            if have != want:
                return False
        return True

    return matches
