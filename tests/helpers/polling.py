"""The few polling and retry settings tests derive from ``rl_lustre.testing``'s ``FAST_BACKOFF``
and ``FAST_RETRY`` (which every other test uses as they are), each with the reason it differs.

A test never writes its own ``Backoff(...)`` or ``RetryPolicy(...)`` for speed: the exported
ones are the one source; the tests of ``Backoff`` and ``RetryPolicy`` themselves
(``test_gcp_wait``, ``test_gcp_errors``' busy timeout) construct what they test.
"""

from __future__ import annotations

import attrs

from rl_lustre.gcp import Backoff, RetryPolicy
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY

# The executor's fake steps last ten milliseconds or more and its tests check which ran at the
# same time: they wait polling every 5-10 ms, since FAST_BACKOFF's 50 ms cap would stretch a
# 10 ms step fivefold and blur the overlaps they check.
FINE_BACKOFF: Backoff = attrs.evolve(FAST_BACKOFF, initial=0.005, maximum=0.01)


def giving_up_after(attempts: int) -> RetryPolicy:
    """``FAST_RETRY`` that gives up after ``attempts`` tries, for the tests that count the tries a
    lasting fault gets (``FAST_RETRY``'s five would change the count they check, or the time a
    fault injected for every try takes).

    Examples:
        >>> giving_up_after(3).attempts, giving_up_after(3).maximum == FAST_RETRY.maximum
        (3, True)
    """
    return attrs.evolve(FAST_RETRY, attempts=attempts)
