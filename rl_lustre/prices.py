"""The prices a cost is computed with: the dated list prices of :mod:`rl_lustre.catalog`,
your own rates, and your discounts (committed use, negotiated, reservations).

:class:`Prices` gives the hourly rate of a VM by how it is provisioned (Spot, flex-start,
reserved, on-demand) and of Managed Lustre by tier; :mod:`rl_lustre.cost` prices a
deployment's resources with it (and ``rl_lustre`` exports it as ``rl_lustre.Prices``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from os import PathLike
from typing import Any

import attrs

from ._public import public
from .catalog import PRICES, MachinePrice, PriceTable
from .errors import ConfigError

__all__ = ["Prices", "Provisioning"]

Provisioning = str  # "Spot", "flex-start", "reserved" or "on-demand", as the plan's node pools say


def _fraction(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError("Prices", attribute.name, value, "must be a fraction from 0 up to (not including) 1")


def _rates(instance: Any, attribute: attrs.Attribute[Any], value: Mapping[Any, Any]) -> None:
    for key, rate in value.items():
        if isinstance(rate, MachinePrice):
            numbers = [rate.on_demand, rate.spot] + [r for r in (rate.reserved, rate.flex_start) if r is not None]
        else:
            numbers = [rate]
        for n in numbers:
            if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 <= n < math.inf:
                raise ConfigError(
                    "Prices", f"{attribute.name}[{key!r}]", rate, "must be a finite price of at least 0 USD"
                )


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class Prices:
    """The prices a cost is computed with: the dated table, your own rates, your discounts.

    Examples:
        >>> from rl_lustre import MachinePrice
        >>> mine = Prices(compute_discount=0.2,
        ...               machines={"a4-highgpu-8g": MachinePrice(on_demand=90.0, spot=30.0, reserved=55.0)})
        >>> mine.machine_rate("a4-highgpu-8g", "reserved", "us-east1")
        (55.0, '')
        >>> mine.machine_rate("n2-highmem-16", "on-demand", "us-east1")
        (0.84, '')

    Args:
        table: the dated list prices (the default: rl_lustre's own table).
        machines: your rates per machine type; they replace the table's (no discount
            applies to them: give the rate you pay).
        lustre_gib_month: your USD per GiB-month per tier (MB/s per TiB).
        compute_discount: fraction off the table's on-demand and reserved VM rates
            (committed use or negotiated discounts).
        spot_discount: fraction off the table's Spot rates.
        lustre_discount: fraction off the table's Lustre rates.
    """

    table: PriceTable = PRICES
    machines: Mapping[str, MachinePrice] = attrs.field(factory=dict, validator=_rates)
    lustre_gib_month: Mapping[int, float] = attrs.field(factory=dict, validator=_rates)
    compute_discount: float = attrs.field(default=0.0, validator=_fraction)
    spot_discount: float = attrs.field(default=0.0, validator=_fraction)
    lustre_discount: float = attrs.field(default=0.0, validator=_fraction)

    @classmethod
    def from_file(cls, path: str | PathLike[str]) -> Prices:
        """Prices from a JSON file with any of this class's fields but ``table``.

        Example::

            # prices.json: {"compute_discount": 0.25,
            #               "machines": {"a4-highgpu-8g": {"on_demand": 80, "spot": 30}},
            #               "lustre_gib_month": {"500": 0.30}}
            Prices.from_file("prices.json")

        Raises:
            ConfigError: the file is missing, is not JSON, or has an unknown field or a bad value.
        """
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise ConfigError("Prices", "file", str(path), f"must be a readable JSON file ({exc})") from exc
        if not isinstance(data, dict):
            raise ConfigError("Prices", "file", str(path), "must hold a JSON object")
        known = {"machines", "lustre_gib_month", "compute_discount", "spot_discount", "lustre_discount"}
        for key in data:
            if key not in known:
                raise ConfigError("Prices", key, data[key], f"is not a price field ({', '.join(sorted(known))})")
        try:
            machines = {m: MachinePrice(**rate) for m, rate in data.get("machines", {}).items()}
            lustre = {int(tier): rate for tier, rate in data.get("lustre_gib_month", {}).items()}
        except (TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(
                "Prices",
                "file",
                str(path),
                f"machines must map a machine type to {{on_demand, spot[, reserved, flex_start]}} and "
                f"lustre_gib_month a tier to a price ({exc})",
            ) from exc
        rest = {k: data[k] for k in ("compute_discount", "spot_discount", "lustre_discount") if k in data}
        return cls(machines=machines, lustre_gib_month=lustre, **rest)

    def machine_rate(
        self, machine_type: str, provisioning: Provisioning, region: str | None
    ) -> tuple[float | None, str]:
        """USD per hour of one VM, and a note when the price is a stand-in or unknown.

        Examples:
            >>> Prices().machine_rate("a4-highgpu-8g", "Spot", "us-east1")
            (37.0, '')
            >>> Prices().machine_rate("a4-highgpu-8g", "Spot", "europe-west4")[1]
            "no price recorded for europe-west4; us-central1's list price used"
            >>> Prices().machine_rate("a4-highgpu-8g", "flex-start", "us-east1")
            (64.44, '')
            >>> Prices().machine_rate("a3-highgpu-8g", "flex-start", "us-east1")[1][:32]
            'no flex-start rate recorded: the'
        """
        if machine_type in self.machines:
            price = self.machines[machine_type]
            return _pick(price, provisioning), _flex_note(price, provisioning)
        price_or_none = self.table.machines.get(machine_type)
        if price_or_none is None:
            return None, f"no price for machine type {machine_type}; pass Prices(machines={{...}})"
        flex = _flex_note(price_or_none, provisioning)
        if flex:
            rate = price_or_none.on_demand * (1 - self.compute_discount)
            return round(rate, 6), "; ".join(n for n in (flex, self._region_note(region)) if n)
        if provisioning == "Spot":
            rate = price_or_none.spot * (1 - self.spot_discount)
        else:
            rate = _pick(price_or_none, provisioning) * (1 - self.compute_discount)
        return round(rate, 6), self._region_note(region)

    def lustre_rate(self, tier: int) -> tuple[float | None, str]:
        """USD per GiB-hour of Managed Lustre at ``tier`` (MB/s per TiB), and a note.

        Examples:
            >>> round(Prices().lustre_rate(500)[0] * 18000, 2)
            8.38
        """
        if tier in self.lustre_gib_month:
            return self.lustre_gib_month[tier] / self.table.hours_per_month, ""
        month = self.table.lustre_gib_month.get(tier)
        if month is None:
            return None, f"no price for Lustre tier {tier} MB/s/TiB"
        return month * (1 - self.lustre_discount) / self.table.hours_per_month, ""

    def _region_note(self, region: str | None) -> str:
        if region is None or region in self.table.same_price_regions:
            return ""
        return f"no price recorded for {region}; {self.table.region}'s list price used"


def _flex_note(price: MachinePrice, provisioning: Provisioning) -> str:
    if provisioning == "flex-start" and price.flex_start is None:
        return (
            "no flex-start rate recorded: the on-demand rate is shown (Google lists flex-start at a discount; "
            "pass Prices(machines={...: MachinePrice(..., flex_start=...)}))"
        )
    return ""


def _pick(price: MachinePrice, provisioning: Provisioning) -> float:
    if provisioning == "flex-start":
        return price.flex_start if price.flex_start is not None else price.on_demand
    if provisioning == "Spot":
        return price.spot
    if provisioning == "reserved" and price.reserved is not None:
        return price.reserved
    return price.on_demand
