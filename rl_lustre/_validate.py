"""attrs validators that raise :class:`~rl_lustre.errors.ConfigError` naming the rule."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from .catalog import LABEL_DEPLOYMENT, LABEL_MANAGED_BY
from .errors import ConfigError

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]

_SECRET_WORDS = frozenset({"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY"})
_SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "APIKEY", "CREDENTIALS")


def looks_secret(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret.

    Whole words count (``HF_TOKEN``, ``WANDB_API_KEY``, ``DB_PASSWORD``), so that
    ``TOKENIZERS_PARALLELISM`` or ``MONKEY_PATCH`` do not.

    Example:
        >>> looks_secret("HF_TOKEN"), looks_secret("wandb_api_key"), looks_secret("TOKENIZERS_PARALLELISM")
        (True, True, False)
    """
    words = [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]
    return any(w in _SECRET_WORDS or w.endswith(_SECRET_SUFFIXES) for w in words)


def fail(instance: Any, field: str, value: Any, rule: str) -> None:
    raise ConfigError(type(instance).__name__, field, value, rule)


def matches(pattern: str, rule: str, *, optional: bool = False) -> Validator:
    """The value is a string fully matching ``pattern``."""
    rx = re.compile(pattern)

    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if optional and value is None:
            return
        if not isinstance(value, str) or not rx.fullmatch(value):
            fail(inst, attr.name, value, rule)

    return check


def integer(
    *, min: int | None = None, max: int | None = None, optional: bool = False
) -> Validator:
    """The value is an int (not a bool) within ``[min, max]``."""

    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if optional and value is None:
            return
        if not isinstance(value, int) or isinstance(value, bool):
            fail(inst, attr.name, value, "must be a whole number")
        if min is not None and value < min:
            fail(inst, attr.name, value, f"must be at least {min}")
        if max is not None and value > max:
            fail(inst, attr.name, value, f"must be at most {max}")

    return check


def number(*, gt: float | None = None, ge: float | None = None, le: float | None = None) -> Validator:
    """The value is a real number, ``> gt`` (or ``>= ge``) and ``<= le``."""

    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            fail(inst, attr.name, value, "must be a number")
        if gt is not None and value <= gt:
            fail(inst, attr.name, value, f"must be greater than {gt:g}")
        if ge is not None and value < ge:
            fail(inst, attr.name, value, f"must be at least {ge:g}")
        if le is not None and value > le:
            fail(inst, attr.name, value, f"must be at most {le:g}")

    return check


def boolean(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        fail(inst, attr.name, value, "must be True or False")


def one_of(choices: Iterable[Any], *, optional: bool = False) -> Validator:
    allowed = list(choices)

    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if optional and value is None:
            return
        if value not in allowed:
            fail(inst, attr.name, value, f"must be one of {', '.join(map(repr, allowed))}")

    return check


# https://cloud.google.com/resource-manager/docs/labels-overview#requirements
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_RESERVED_LABELS = (LABEL_MANAGED_BY, LABEL_DEPLOYMENT)


def gcp_labels(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Mapping):
        fail(inst, attr.name, value, "must be a mapping of label key to value")
    if len(value) > 60:
        fail(inst, attr.name, value, "at most 60 labels (64 less the ones rl_lustre adds)")
    for k, v in value.items():
        if k in _RESERVED_LABELS:
            fail(inst, f"{attr.name}[{k!r}]", k, "is set by rl_lustre itself to mark what it owns")
        if not isinstance(k, str) or not _LABEL_KEY.fullmatch(k):
            fail(
                inst,
                f"{attr.name}[{k!r}]",
                k,
                "label keys are 1-63 lowercase letters, digits, '_' or '-', starting with a letter",
            )
        if not isinstance(v, str) or not _LABEL_VALUE.fullmatch(v):
            fail(
                inst,
                f"{attr.name}[{k!r}]",
                v,
                "label values are at most 63 lowercase letters, digits, '_' or '-'",
            )


def cidr(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple):
        fail(inst, attr.name, value, "must be a sequence of CIDR blocks like '203.0.113.7/32'")
    for block in value:
        try:
            ipaddress.ip_network(block, strict=True)
        except (ValueError, TypeError):
            fail(inst, attr.name, block, "must be a CIDR block with host bits zero, like '203.0.113.0/24'")


def env_name(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    for name in value:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            fail(inst, attr.name, name, "environment variable names are letters, digits and '_', not starting with a digit")


def to_tuple(value: Any) -> Any:
    """Converter: lists and other iterables become tuples, strings stay as they are."""
    if isinstance(value, (str, bytes)) or value is None or isinstance(value, Mapping):
        return value
    try:
        return tuple(value)
    except TypeError:
        return value


def to_frozen_mapping(value: Any) -> Any:
    """Converter: a mapping becomes an immutable, hashable, ordered mapping."""
    if isinstance(value, Mapping) and not isinstance(value, FrozenDict):
        return FrozenDict(value)
    return value


class FrozenDict(dict[str, Any]):
    """A dict that refuses mutation and hashes by content, so specs stay hashable."""

    def _immutable(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("this mapping is part of a frozen spec; use attrs.evolve to change it")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _immutable  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))
