"""The public edge: which modules are the API, and the decorator that names an object by them.

The public API is exactly what :data:`PUBLIC_MODULES` export in their ``__all__``:
``rl_lustre`` (the objects, and every type their methods take or return),
``rl_lustre.errors`` and ``rl_lustre.testing``. Every other module is internal whatever its
name: it may change without notice, even where an old deep import still works.

Objects are defined where they belong and re-exported; :func:`public` sets their
``__module__`` to the public module, so that reprs, pickles and the reference docs name
``rl_lustre.Plan``, not ``rl_lustre.plan.graph.Plan``. doctest looks for an object's examples
only in the module its ``__module__`` names, so :func:`public` also lists the object in its
defining module's ``__test__``: its examples still run with that module's.

Examples:
    >>> import rl_lustre
    >>> rl_lustre.Plan.__module__, rl_lustre.Plan.__qualname__
    ('rl_lustre', 'Plan')
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from types import FunctionType
from typing import Any, TypeVar

__all__ = ["PUBLIC_MODULES", "public"]

PUBLIC_MODULES = ("rl_lustre", "rl_lustre.errors", "rl_lustre.testing")

T = TypeVar("T", bound=Callable[..., Any])


def public(home: str) -> Callable[[T], T]:
    """Class or function decorator: ``obj`` is exported by ``home``, one of :data:`PUBLIC_MODULES`.

    A class's own methods are named by ``home`` too (the reference docs read a method whose
    module differs from its class's as an alias). Put it above any other class decorator
    (``attrs.frozen`` makes a new class).

    Example::

        @public("rl_lustre")
        @attrs.frozen
        class Plan: ...
    """
    if home not in PUBLIC_MODULES:
        raise ValueError(f"public(home={home!r}): home must be one of {', '.join(PUBLIC_MODULES)}")

    def mark(obj: T) -> T:
        defining = obj.__module__
        examples = sys.modules[defining].__dict__.setdefault("__test__", {})
        items: list[Any] = [obj, *_own_functions(obj, defining)]
        for item in items:
            if item.__doc__:
                examples[item.__qualname__] = item
            item.__module__ = home
        return obj

    return mark


def _own_functions(obj: object, module: str) -> Iterator[FunctionType]:
    """The functions a class defines in its body (methods, static and class methods, what they wrap)."""
    if not inspect.isclass(obj):
        return
    for value in vars(obj).values():
        function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        while isinstance(function, FunctionType):  # a wrapper, then what it wraps
            if function.__module__ == module:
                yield function
            function = getattr(function, "__wrapped__", None)
