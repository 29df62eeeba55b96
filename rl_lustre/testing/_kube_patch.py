"""How the API server writes what a client sends, for :class:`~rl_lustre.testing.kube.KubeFake`:
JSON merge patches (RFC 7386), strategic merge patches (lists merged by their merge key,
``$patch``/``$retainKeys``/``$setElementOrder``/``$deleteFromPrimitiveList`` directives,
as ``kubectl apply`` sends them) and the dropping of empty ``omitempty`` fields that a
built-in kind's Go types do on every write.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"

# Fields whose value is a Go map: the empty strings inside are values, not omitted fields.
_MAP_FIELDS = frozenset(
    {
        "labels",
        "annotations",
        "data",
        "stringData",
        "binaryData",
        "nodeSelector",
        "capacity",
        "limits",
        "requests",
        "volumeAttributes",
        "matchLabels",
        "allocatable",
        "parameters",
        "selector",
    }
)
# String fields that are pointers in the Go types: an empty string is stored, not dropped.
KEEP_EMPTY_STRINGS = {
    "PersistentVolumeClaim": frozenset({"spec.storageClassName", "spec.volumeAttributesClassName"}),
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch.

    Examples:
        >>> merge_patch({"a": 1, "b": [1, 2]}, {"a": None, "b": [3]})
        {'b': [3]}
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(
    target: Any, patch: Any, merge_keys: Mapping[str, str], merged_lists: frozenset[str] = frozenset(), path: str = ""
) -> Any:
    """A strategic merge patch as the API server applies it to a built-in kind.

    Lists whose dotted field path has a key in ``merge_keys`` are merged element by
    element on that key; lists of scalars in ``merged_lists`` are merged as sets; other
    lists are replaced. Returns None when the patch deletes the whole map.

    Examples:
        >>> keys = {"spec.containers": "name"}
        >>> strategic_merge({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}]}},
        ...                 {"spec": {"containers": [{"name": "a", "image": "y"}]}}, keys)
        {'spec': {'containers': [{'name': 'a', 'image': 'y'}, {'name': 'b'}]}}
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return _clean({k: v for k, v in patch.items() if k != _DIRECTIVE})
    result = dict(target) if isinstance(target, Mapping) else {}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN):
            continue
        if key.startswith(_ORDER):
            orders[key[len(_ORDER) :]] = list(value or [])
            continue
        sub = f"{path}.{key}" if path else key
        if key.startswith(_DELETE_FROM):
            field = key[len(_DELETE_FROM) :]
            result[field] = [x for x in result.get(field) or [] if x not in (value or [])]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            merged = strategic_merge(result.get(key), value, merge_keys, merged_lists, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and sub in merge_keys:
            result[key] = _merge_list(result.get(key) or [], value, merge_keys[sub], merge_keys, merged_lists, sub)
        elif isinstance(value, list) and sub in merged_lists:
            result[key] = list(result.get(key) or []) + [x for x in value if x not in (result.get(key) or [])]
        else:
            result[key] = _clean(value)
    for field, order in orders.items():
        key_name = merge_keys.get(f"{path}.{field}" if path else field)
        result[field] = _reorder(result.get(field) or [], order, key_name)
    retain = patch.get(_RETAIN)
    if retain is not None:
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(
    current: list[Any],
    items: list[Any],
    key: str,
    merge_keys: Mapping[str, str],
    merged_lists: frozenset[str],
    path: str,
) -> list[Any]:
    out = copy.deepcopy(current)
    for item in items:
        if isinstance(item, Mapping) and item.get(_DIRECTIVE) == "replace" and len(item) == 1:
            return [_clean(i) for i in items if i is not item]
        if not isinstance(item, Mapping):
            if item not in out:
                out.append(copy.deepcopy(item))
            continue
        at = next((i for i, o in enumerate(out) if isinstance(o, Mapping) and o.get(key) == item.get(key)), None)
        if item.get(_DIRECTIVE) == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(strategic_merge({}, item, merge_keys, merged_lists, path))
        else:
            out[at] = strategic_merge(out[at], item, merge_keys, merged_lists, path)
    return out


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """``items`` with those named in ``order`` first, in that order (``$setElementOrder``)."""

    def ident(x: Any) -> Any:
        return x.get(key) if key and isinstance(x, Mapping) else x

    wanted = [ident(o) for o in order]
    ranked = sorted(
        range(len(items)),
        key=lambda i: (wanted.index(ident(items[i])) if ident(items[i]) in wanted else len(wanted), i),
    )
    return [items[i] for i in ranked]


def _clean(value: Any) -> Any:
    """A patch value without directives (for parts that are replaced, not merged)."""
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def omit_empty(obj: Any, kind: str, path: str = "") -> Any:
    """``obj`` as a built-in kind's Go types serialise it: empty strings of ``omitempty``
    string fields dropped (a PersistentVolume sent with ``storageClassName: ""`` is stored
    without it). Values inside maps (labels, annotations, data) are kept; ``status`` is
    the controllers' and left alone.

    Examples:
        >>> omit_empty({"spec": {"storageClassName": "", "capacity": {"storage": "1Ti"}},
        ...             "metadata": {"labels": {"empty": ""}}}, "PersistentVolume")
        {'spec': {'capacity': {'storage': '1Ti'}}, 'metadata': {'labels': {'empty': ''}}}
    """
    if isinstance(obj, list):
        return [omit_empty(v, kind, path) for v in obj]
    if not isinstance(obj, Mapping):
        return obj
    keep = KEEP_EMPTY_STRINGS.get(kind, frozenset())
    out = {}
    for key, value in obj.items():
        sub = f"{path}.{key}" if path else key
        if (not path and key == "status") or (key in _MAP_FIELDS and isinstance(value, Mapping)):
            out[key] = value
        elif value == "" and sub not in keep:
            continue
        else:
            out[key] = omit_empty(value, kind, sub)
    return out
