"""Fields whose value, when the user leaves them out, is derived from other fields.

Each such field is two attributes, written out in the class body (mypy's attrs plugin
reads only ``attrs.field`` calls there)::

    _given_ray_version: str | None = attrs.field(alias="ray_version", default=None, eq=False, repr=False)
    ray_version: str | None = attrs.field(init=False)

``_given_<name>`` is what the user passed as ``<name>=`` (None when left out);
``<name>`` is the value in force, set by :func:`settle` on construction. ``attrs.evolve``
passes on what the user gave, so ``attrs.evolve(cluster, image=...)`` derives
``ray_version`` again from the new image while a ``ray_version`` the user set keeps
winning. Equality, hashing and the repr use the value in force, as for any other field.
"""

from __future__ import annotations

from typing import Any


def settle(spec: Any, name: str, value: Any) -> None:
    """Set the value in force of the derived field ``name`` on a frozen spec."""
    object.__setattr__(spec, name, value)
