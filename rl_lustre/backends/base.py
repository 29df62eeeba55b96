"""The contract every backend fulfils."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..goodput import GoodputLedger
    from ..prices import Prices
    from ..queueing.state import QueueState
    from ..run import Run
    from ..spec import JobSpec

__all__ = ["Backend", "missing_methods"]


class Backend(Protocol):
    """The live side of one ``Cluster``.

    ``up()`` is idempotent and adopts a deployment that an earlier process left
    running; ``down()`` removes what ``up()`` made and never what the user owns (their
    network, an ``existing=True`` volume, the local volume directory).
    """

    def up(self, *, keep_on_failure: bool = False, check: bool = True) -> object:
        """Create (or adopt) the deployment and wait until it accepts jobs; with ``check``,
        first ask whatever the backend can ask, read-only, about capacity.

        May return a report of what it did; ``Cluster.up()`` does not use it.
        """

    def down(self, *, delete_preload_image: bool = False, discard_results: bool = False) -> object:
        """Tear the deployment down, exporting the runs' results first; a no-op when nothing
        runs. What deployments share (the preload disk image) is kept unless
        ``delete_preload_image``; a volume whose results were not exported is kept unless
        ``discard_results``."""

    def submit(self, job: JobSpec, *, fresh: bool = False) -> Run:
        """Submit ``job``, or attach to the same job when it is still running."""

    def submit_all(self, jobs: Sequence[JobSpec], *, fresh: bool = False, start_over: str = ...) -> list[Run]:
        """Submit every job (as ``submit``), checking them all before sending any; ``start_over``
        is the call a warning about jobs with nothing left to do advises."""

    def attach(self, job_id: str) -> Run:
        """A handle on an existing job by its submission id."""

    def queue(self) -> list[tuple[Run, QueueState]]:
        """The cluster's jobs that have not ended, in the queue's order, with their queue state."""

    def cluster_goodput(
        self, since: float | None, until: float | None, *, prices: Prices | None = None, runs: list[str] | None = None
    ) -> GoodputLedger:
        """The goodput ledger of the cluster over ``[since, until)``, or of a sweep's ``runs``."""

    def describe(self) -> str:
        """One line saying what runs and where (for messages)."""

    def cleanup_hint(self) -> str:
        """How to find and remove the deployment later, for ``keep=True``."""


def missing_methods(obj: object) -> list[str]:
    """The methods of :class:`Backend` that ``obj`` lacks.

    Examples:
        >>> missing_methods(object())[:3]
        ['attach', 'cleanup_hint', 'cluster_goodput']
    """
    wanted = [name for name, value in vars(Backend).items() if callable(value) and not name.startswith("_")]
    return sorted(name for name in wanted if not callable(getattr(obj, name, None)))
