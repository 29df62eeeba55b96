"""What the online check reports: one :class:`CheckItem` per question, gathered in a
:class:`CheckReport`; and the Compute region quota a GPU type counts against."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ._public import public
from .errors import CapacityError

__all__ = ["CheckItem", "CheckReport", "Verdict", "quota_metric"]

Verdict = Literal["ok", "problem", "unknown"]
_MARK = {"ok": "ok", "problem": "PROBLEM", "unknown": "unknown"}

# GPU type → Compute quota metric, where the metric is not the type's name in capitals.
_METRICS = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
    "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
}


def quota_metric(accelerator: str, *, spot: bool) -> str:
    """The regional Compute quota that GPUs of type ``accelerator`` count against.

    Examples:
        >>> quota_metric("nvidia-b200", spot=True), quota_metric("nvidia-h100-80gb", spot=False)
        ('PREEMPTIBLE_NVIDIA_B200_GPUS', 'NVIDIA_H100_GPUS')
    """
    base = _METRICS.get(accelerator) or accelerator.upper().replace("-", "_").replace("TESLA_", "") + "_GPUS"
    return f"PREEMPTIBLE_{base}" if spot else base


@public("rl_lustre")
@attrs.frozen
class CheckItem:
    """One question the check asked, and the answer.

    Attributes:
        what: what was checked (``"zone us-east1-b offers a4-highgpu-8g"``).
        verdict: ``"ok"``, ``"problem"`` (``up()`` would fail) or ``"unknown"`` (could not tell).
        detail: what was found.
        fix: what to do about a problem (the quota to raise, another zone, ...).
    """

    what: str
    verdict: Verdict
    detail: str = ""
    fix: str = ""

    def __str__(self) -> str:
        line = f"{_MARK[self.verdict]:<8} {self.what}"
        if self.detail:
            line += f": {self.detail}"
        if self.fix:
            line += f"\n         -> {self.fix}"
        return line


@public("rl_lustre")
@attrs.frozen
class CheckReport:
    """What :func:`check_cluster` found; ``str()`` is one line per question.

    Examples:
        >>> report = CheckReport("demo", (CheckItem("zone offers x", "ok"),))
        >>> report.ok, str(report).splitlines()[1]
        (True, 'ok       zone offers x')
    """

    cluster: str
    items: tuple[CheckItem, ...]

    @property
    def ok(self) -> bool:
        """No problem found (unknowns do not count against it)."""
        return not self.problems

    @property
    def problems(self) -> list[CheckItem]:
        return [i for i in self.items if i.verdict == "problem"]

    def raise_for_problems(self) -> CheckReport:
        """Raise :class:`~rl_lustre.errors.CapacityError` listing every problem; else return self."""
        if self.problems:
            raise CapacityError(self)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "ok": self.ok, "items": [attrs.asdict(i) for i in self.items]}

    def __str__(self) -> str:
        head = f"check of {self.cluster!r}: " + ("ok" if self.ok else f"{len(self.problems)} problem(s)")
        return "\n".join([head, *map(str, self.items)])
