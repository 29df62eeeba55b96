"""What every labelled-resource adapter does the same way: create or adopt, delete only
what is ours, and wait.

An adapter says how to read its resource (``get_or_none``), where the resource keeps
our labels (``_labels_of``) and how to send and await its own requests; the order of
requests, the ownership checks and the log lines live here, once.

:class:`OwnedResource` fits resources that are gone once their delete operation is
done (Compute networking). :class:`StatefulResource` fits resources that report a
deleting state and must then be waited on until they can no longer be read, and that
are waited on until ready when adopted (GKE clusters and node pools, Lustre instances).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ..errors import NotFoundError
from ._errors import AlreadyExistsError, Api
from ._ownership import Ensured, check_owned
from ._wait import Backoff, ProgressCallback, wait_for

DELETE_TIMEOUT = 3600.0


class OwnedResource:
    """Create-or-adopt and delete-if-ours for one kind of labelled resource.

    Subclasses set ``kind`` (as messages name the resource), ``api``, ``_log`` and
    ``_backoff``, and implement ``get_or_none``, ``wait_ready`` and ``_labels_of``.
    """

    api: ClassVar[Api]
    _log: ClassVar[logging.Logger]
    _backoff: Backoff | None

    @property
    def kind(self) -> str:
        raise NotImplementedError

    def get_or_none(self, name: str) -> Any:
        raise NotImplementedError

    def wait_ready(self, name: str, *, timeout: float, progress: ProgressCallback | None = None) -> Any:
        raise NotImplementedError

    def _labels_of(self, found: Any) -> Mapping[str, str]:
        """The ownership labels ``found`` carries."""
        raise NotImplementedError

    def _being_deleted(self, found: Any) -> bool:
        """Whether ``found`` is in the middle of its deletion."""
        return False

    def _await_gone(self, name: str, *, timeout: float, progress: ProgressCallback | None) -> None:
        """Wait, after its delete operation, until ``name`` no longer exists (here: nothing to wait for)."""

    def _adopt(self, name: str, found: Any, *, wait: bool, timeout: float, progress: ProgressCallback | None) -> Any:
        """Log the adoption of ``found`` and return it as the caller should see it."""
        self._log.info("adopting %s %s", self.kind, name)
        return found

    def _create_or_adopt(
        self,
        name: str,
        body: Any,
        *,
        deployment: str,
        send: Callable[[], Any],
        await_op: Callable[[Any], object],
        wait: bool,
        timeout: float,
        progress: ProgressCallback | None,
        detail: tuple[Any, ...] = ("",),
    ) -> Ensured[Any]:
        """Create ``name`` from ``body`` unless it exists; adopt it if it carries our labels.

        Args:
            send: sends the create request and returns its operation.
            await_op: waits for that operation (raising if it failed).
            detail: a format string and its arguments, appended to the "creating" log line.
        """
        existing = self.get_or_none(name)
        if existing is not None and self._being_deleted(existing):
            # A down() still in progress: let it finish, then create afresh.
            check_owned(self.kind, name, self._labels_of(existing), deployment)
            self._log.info("%s %s is being deleted; waiting for that before creating it", self.kind, name)
            self._await_gone(name, timeout=timeout, progress=progress)
            existing = None
        if existing is None:
            self._log.info("creating %s %s" + detail[0], self.kind, name, *detail[1:])
            try:
                op = send()
            except AlreadyExistsError:
                # Our own earlier attempt may have gone through before a transient error.
                existing = self.get_or_none(name)
                if existing is None:
                    raise
            else:
                if not wait:
                    return Ensured(name, False, body)
                await_op(op)
                return Ensured(name, False, self.wait_ready(name, timeout=timeout, progress=progress))
        check_owned(self.kind, name, self._labels_of(existing), deployment)
        return Ensured(name, True, self._adopt(name, existing, wait=wait, timeout=timeout, progress=progress))

    def _delete_if_ours(
        self,
        name: str,
        *,
        deployment: str,
        send: Callable[[], Any],
        await_op: Callable[[Any], object],
        wait: bool,
        timeout: float,
        progress: ProgressCallback | None,
    ) -> bool:
        """Delete ``name`` if it exists and carries our labels; the ``delete`` of every adapter.

        Args:
            send: sends the delete request and returns its operation.
            await_op: waits for that operation (raising if it failed).

        Returns:
            True if a deletion was started (and, with ``wait``, finished); False if it did not exist.
        """
        existing = self.get_or_none(name)
        if existing is None:
            self._log.debug("%s %s is already gone", self.kind, name)
            return False
        check_owned(self.kind, name, self._labels_of(existing), deployment)
        if not self._being_deleted(existing):
            self._log.info("deleting %s %s", self.kind, name)
            try:
                op = send()
            except NotFoundError:
                return False
            if wait:
                await_op(op)
        if wait:
            self._await_gone(name, timeout=timeout, progress=progress)
        return True


class StatefulResource(OwnedResource):
    """An :class:`OwnedResource` with a lifecycle state: one being deleted is waited on
    until it can no longer be read, and one adopted is waited on until it is ready.

    Subclasses also implement ``_state_of`` (the state in words, ``"ABSENT"`` for None)
    and ``_being_deleted``.
    """

    def _state_of(self, found: Any) -> str:
        raise NotImplementedError

    def wait_gone(
        self, name: str, *, timeout: float = DELETE_TIMEOUT, progress: ProgressCallback | None = None
    ) -> None:
        """Wait until ``name`` no longer exists."""
        wait_for(
            f"{self.kind} {name} to be deleted",
            lambda: self.get_or_none(name),
            done=lambda r: r is None,
            describe=self._state_of,
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )

    def _await_gone(self, name: str, *, timeout: float, progress: ProgressCallback | None) -> None:
        self.wait_gone(name, timeout=timeout, progress=progress)

    def _adopt(self, name: str, found: Any, *, wait: bool, timeout: float, progress: ProgressCallback | None) -> Any:
        self._log.info("adopting %s %s (%s)", self.kind, name, self._state_of(found))
        if wait:
            found = self.wait_ready(name, timeout=timeout, progress=progress)
        return found

    def _wait_for_state(
        self,
        name: str,
        state: str,
        *,
        done: Callable[[Any], bool],
        timeout: float,
        progress: ProgressCallback | None,
        check: Callable[[Any], None] = lambda found: None,
    ) -> Any:
        """Wait until ``done(found)`` and return ``found``; the ``wait_ready`` of every adapter.

        Args:
            state: the awaited state, in words (``"RUNNING"``).
            check: raises if ``found`` is in a state it will not leave by itself.

        Raises:
            NotFoundError: the resource does not exist (or disappeared).
            WaitTimeoutError: not ``done`` within ``timeout``.
        """

        def poll() -> Any:
            found = self.get_or_none(name)
            if found is None:
                raise NotFoundError(f"{self.api}: {self.kind} {name} does not exist")
            check(found)
            return found

        return wait_for(
            f"{self.kind} {name} to be {state}",
            poll,
            done=done,
            describe=self._state_of,
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )
