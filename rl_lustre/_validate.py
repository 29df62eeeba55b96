"""attrs validators that raise :class:`~rl_lustre.errors.ConfigError` naming the rule."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import attrs

from .catalog import RESERVED_LABELS, zone_problem
from .errors import ConfigError

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def fail(instance: Any, field: str, value: Any, rule: str) -> None:
    raise ConfigError(type(instance).__name__, field, value, rule)


def keyword_errors(cls: type) -> type:
    """Class decorator: a call that does not fit ``cls``'s signature (a misspelt keyword,
    a missing required field, a positional argument) is a ConfigError naming the
    parameter, like any other bad input, instead of Python's ``TypeError``.

    Apply it outside ``@attrs.frozen`` (so that it wraps the generated ``__init__``).
    """
    import difflib
    import functools
    import inspect

    init = cls.__init__  # type: ignore[misc]
    sig = inspect.signature(init)
    params = [p for name, p in sig.parameters.items() if name != "self"]
    keywords = [p.name for p in params if p.kind is not p.VAR_KEYWORD]
    required = [p.name for p in params if p.default is p.empty and p.kind is p.KEYWORD_ONLY]
    owner = cls.__name__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            sig.bind(self, *args, **kwargs)
        except TypeError:
            if args:
                raise ConfigError(
                    owner, "arguments", args, f"{owner} takes keyword arguments only, like {owner}(name=...)"
                ) from None
            for key in kwargs:
                if key not in keywords:
                    near = difflib.get_close_matches(key, keywords, n=1)
                    hint = f"; did you mean {near[0]!r}?" if near else f" (its parameters: {', '.join(keywords)})"
                    raise ConfigError(owner, key, kwargs[key], f"is not a parameter of {owner}{hint}") from None
            missing = [name for name in required if name not in kwargs]
            raise ConfigError(
                owner, ", ".join(missing) or "arguments", None, f"{'are' if len(missing) > 1 else 'is'} required"
            ) from None
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def field_name(attr: attrs.Attribute[Any]) -> str:
    """The name a field has in its class's ``__init__`` (its alias): what the user wrote."""
    return attr.alias or attr.name


def type_name(value: Any) -> str:
    """``'a str'``, ``'None'``, ``'an int'``: how a value's type reads in a message."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def need(
    owner: str, param: str, value: Any, types: type | tuple[type, ...], what: str, *, optional: bool = False
) -> None:
    """Raise a ConfigError unless ``value`` is an instance of ``types`` (bools are not ints).

    For the parameters of public functions and methods, checked before anything else runs.

    Examples:
        >>> need("Cluster.submit", "job", "x", object, "a GRPOJob")
        >>> need("Cluster.submit", "job", None, int, "a GRPOJob")
        Traceback (most recent call last):
        ...
        rl_lustre.errors.ConfigError: Cluster.submit.job=None: must be a GRPOJob (got None)
    """
    if optional and value is None:
        return
    kinds = types if isinstance(types, tuple) else (types,)
    bool_ok = bool in kinds or object in kinds
    if not isinstance(value, kinds) or (isinstance(value, bool) and not bool_ok):
        raise ConfigError(owner, param, value, f"must be {what} (got {type_name(value)})")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# What a value written into a command line may hold besides printable text: NeMo-RL's
# stop strings are newlines (["</answer>", "\n\n"]), and a newline or tab inside a quoted
# string survives the shell and Hydra's parser alike. Never in a name, key or path.
VALUE_WHITESPACE = "\n\t"


def control_char(text: str, *, allow: str = "") -> str | None:
    r"""The first control character in ``text`` (NUL, newline, escape, ...) not in ``allow``, if any.

    Examples:
        >>> control_char("a\nb"), control_char("a\nb", allow=VALUE_WHITESPACE), control_char("a\x00\nb", allow="\n")
        ('\n', None, '\x00')
    """
    for m in _CONTROL.finditer(text):
        if m.group(0) not in allow:
            return m.group(0)
    return None


def no_control(owner: str, field: str, value: Any, *, allow: str = "") -> None:
    """Refuse control characters (but those in ``allow``) anywhere in a string, or in the
    strings nested in a value (its mapping keys included)."""
    from ._secrets import _strings

    for s in _strings(value):
        c = control_char(s, allow=allow)
        if c is not None:
            but = " other than newlines and tabs" if allow == VALUE_WHITESPACE else ""
            raise ConfigError(
                owner,
                field,
                value,
                f"must not contain control characters{but} (found {c!r}, U+{ord(c):04X}): "
                "they break command lines, paths and logs",
            )


def matches(pattern: str, rule: str, *, optional: bool = False) -> Validator:
    """The value is a string fully matching ``pattern``."""
    rx = re.compile(pattern)

    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if optional and value is None:
            return
        if not isinstance(value, str) or not rx.fullmatch(value):
            fail(inst, field_name(attr), value, rule)
        not_secret(inst, field_name(attr), value)

    return check


# A service account e-mail: one of a project (NAME@PROJECT.iam.gserviceaccount.com; a
# domain-scoped project example.com:PROJECT has NAME@PROJECT.example.com.iam.gserviceaccount.com)
# or a project's Compute Engine default (NUMBER-compute@developer.gserviceaccount.com).
SERVICE_ACCOUNT_PATTERN = (
    r"[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]"
    r"(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.iam\.gserviceaccount\.com"
    r"|[0-9]+-compute@developer\.gserviceaccount\.com"
)
SERVICE_ACCOUNT_RULE = (
    "must be a service account e-mail like 'rl-nodes@my-project.iam.gserviceaccount.com' (6-30 characters before the @)"
)
service_account = matches(SERVICE_ACCOUNT_PATTERN, SERVICE_ACCOUNT_RULE, optional=True)


def known_zone(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    """The value (a zone, or None) is a Compute Engine zone rl_lustre knows of (see
    :func:`rl_lustre.catalog.zone_problem`; ``$RL_LUSTRE_EXTRA_ZONES`` adds newer ones)."""
    if isinstance(value, str) and (problem := zone_problem(value)) is not None:
        fail(inst, field_name(attr), value, problem)


def not_secret(inst: Any, field: str, value: Any) -> None:
    """Refuse a value shaped like a token or key: a secret does not belong in a spec."""
    from ._secrets import secret_shape

    what = secret_shape(value)
    if what is not None:
        fail(
            inst,
            field,
            value,
            f"looks like {what}; secrets never go into a spec (specs are printed, planned and "
            "logged): list the NAME of the environment variable holding it in Cluster(secrets=[...])",
        )


def integer(*, min: int | None = None, max: int | None = None, optional: bool = False) -> Validator:
    """The value is an int (not a bool) within ``[min, max]``."""

    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if optional and value is None:
            return
        if not isinstance(value, int) or isinstance(value, bool):
            fail(inst, field_name(attr), value, "must be a whole number")
        if min is not None and value < min:
            fail(inst, field_name(attr), value, f"must be at least {min}")
        if max is not None and value > max:
            fail(inst, field_name(attr), value, f"must be at most {max}")

    return check


def number(*, gt: float | None = None, ge: float | None = None, le: float | None = None) -> Validator:
    """The value is a real number, ``> gt`` (or ``>= ge``) and ``<= le``."""

    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            fail(inst, field_name(attr), value, "must be a number")
        if gt is not None and value <= gt:
            fail(inst, field_name(attr), value, f"must be greater than {gt:g}")
        if ge is not None and value < ge:
            fail(inst, field_name(attr), value, f"must be at least {ge:g}")
        if le is not None and value > le:
            fail(inst, field_name(attr), value, f"must be at most {le:g}")

    return check


def boolean(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        fail(inst, field_name(attr), value, "must be True or False")


def one_of(choices: Iterable[Any], *, optional: bool = False) -> Validator:
    allowed = list(choices)

    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if optional and value is None:
            return
        if value not in allowed:
            fail(inst, field_name(attr), value, f"must be one of {', '.join(map(repr, allowed))}")

    return check


# https://cloud.google.com/resource-manager/docs/labels-overview#requirements
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_RESERVED_LABELS = RESERVED_LABELS


def gcp_labels(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Mapping):
        fail(inst, field_name(attr), value, "must be a mapping of label key to value")
    if len(value) > 60:
        fail(inst, field_name(attr), value, "at most 60 labels (64 less the ones rl_lustre adds)")
    for k, v in value.items():
        if k in _RESERVED_LABELS:
            fail(inst, f"{field_name(attr)}[{k!r}]", k, "is set by rl_lustre itself to mark what it owns")
        if not isinstance(k, str) or not _LABEL_KEY.fullmatch(k):
            fail(
                inst,
                f"{field_name(attr)}[{k!r}]",
                k,
                "label keys are 1-63 lowercase letters, digits, '_' or '-', starting with a letter",
            )
        if not isinstance(v, str) or not _LABEL_VALUE.fullmatch(v):
            fail(
                inst,
                f"{field_name(attr)}[{k!r}]",
                v,
                "label values are at most 63 lowercase letters, digits, '_' or '-'",
            )
        not_secret(inst, f"{field_name(attr)}[{k!r}]", v)


def cidr(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    """A sequence of CIDR blocks, each parsed by :mod:`ipaddress`: a prefix length is
    required (a bare address is refused, with the ``/32`` it probably meant) and host
    bits must be zero."""
    if isinstance(value, str) or not isinstance(value, tuple):
        fail(
            inst,
            field_name(attr),
            value,
            f"must be a list of CIDR blocks like ['203.0.113.0/24'] (got {type_name(value)})",
        )
    for block in value:
        where = field_name(attr)
        if not isinstance(block, str):
            fail(inst, where, block, f"must be a CIDR block string like '203.0.113.0/24' (got {type_name(block)})")
        if block != block.strip() or "/" not in block:
            try:
                addr = ipaddress.ip_address(block.strip())
            except ValueError:
                fail(inst, where, block, "must be a CIDR block like '203.0.113.0/24' (address/prefix length)")
            else:
                fail(
                    inst,
                    where,
                    block,
                    f"is an address, not a CIDR block; write '{addr}/{addr.max_prefixlen}' for this address alone",
                )
        try:
            ipaddress.ip_network(block, strict=True)
        except ValueError as exc:
            try:
                loose = ipaddress.ip_network(block, strict=False)
            except ValueError:
                fail(inst, where, block, f"must be a CIDR block like '203.0.113.0/24' ({exc})")
            else:
                fail(
                    inst,
                    where,
                    block,
                    f"has host bits set; the block is '{loose}' (or write "
                    f"'{block.split('/')[0]}/{loose.max_prefixlen}' for the address alone)",
                )


def whole_internet(blocks: Iterable[str]) -> str | None:
    """The block (or blocks) that open an address family to everyone, if any, as written.

    Every spelling counts: ``0.0.0.0/0``, ``0/0``-style masks like ``0.0.0.0/0.0.0.0``,
    ``0.0.0.0/00``, ``::/0`` and ``::0/0``, the IPv4-mapped ``::ffff:0:0/96``, and blocks
    that only together cover everything (``0.0.0.0/1`` with ``128.0.0.0/1``). The answer
    quotes what the user typed, not the normalised block.

    Examples:
        >>> whole_internet(["0.0.0.0/1", "128.0.0.0/1"])
        '0.0.0.0/1, 128.0.0.0/1'
        >>> whole_internet(["10.0.0.0/8", "0.0.0.0/00"])
        '0.0.0.0/00'
        >>> whole_internet(["10.0.0.0/8"]) is None
        True
    """
    nets: list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for b in blocks:
        try:
            nets.append((b, ipaddress.ip_network(b, strict=False)))
        except (ValueError, TypeError):
            continue
    mapped = ipaddress.IPv6Network("::ffff:0:0/96")
    for typed, net in nets:
        if net.prefixlen == 0 or (isinstance(net, ipaddress.IPv6Network) and mapped.subnet_of(net)):
            return typed
    for version in (4, 6):
        family = [net for _, net in nets if net.version == version]
        if any(n.prefixlen == 0 for n in ipaddress.collapse_addresses(family)):  # type: ignore[type-var]
            return ", ".join(typed for typed, net in nets if net.version == version)
    return None


def names(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    """A list or tuple of strings, never one string (which would become its characters)."""
    if isinstance(value, (str, bytes)):
        fail(inst, field_name(attr), value, f"must be a list or tuple of names, not one string; write ({value!r},)")
    if not isinstance(value, tuple):
        fail(inst, field_name(attr), value, f"must be a list or tuple of names (got {type_name(value)})")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            fail(inst, field_name(attr), item, f"item {i} must be a string (got {type_name(item)})")


def env_name(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, Mapping)):
        names(inst, attr, value)
    for name in value:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            fail(
                inst,
                field_name(attr),
                name,
                "environment variable names are letters, digits and '_', not starting with a digit",
            )


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


# Typed converters: the constructor's signature says what a field takes. Anything else passes
# through unchanged, for the field's validator to refuse with the field's name and rule.


def strings(value: Iterable[str]) -> tuple[str, ...]:
    """Converter for a field of strings: a list (or any iterable) becomes a tuple."""
    return cast("tuple[str, ...]", to_tuple(value))


def string_mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    """Converter for a field of names to strings: an immutable, hashable copy."""
    return cast("Mapping[str, str]", to_frozen_mapping(value))


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
