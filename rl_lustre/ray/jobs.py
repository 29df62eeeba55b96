"""The Ray Jobs API, through Ray's own ``JobSubmissionClient``, with our errors.

Every call goes through :func:`ray_errors`, the one place where Ray's, requests'
and aiohttp's exceptions become :class:`~rl_lustre.errors.RayError`. The client works
against any dashboard address: the local head's, or a port-forwarded one on GKE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._public import public
from ..errors import NotReadyError, RayError, RLLustreError, WaitTimeoutError
from ..outages import Outage, OutageBudget

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

__all__ = ["TERMINAL", "JobInfo", "JobsClient", "ray_errors"]

logger = logging.getLogger("rl_lustre.ray.jobs")
# Ray's Jobs API (ray/dashboard/modules/job): the supervisor actor's name and how often the
# job monitor pings it (JOB_ACTOR_NAME_TEMPLATE, JobManager.JOB_MONITOR_LOOP_PERIOD_S).
_SUPERVISOR_ACTOR = "_ray_internal_job_actor_{}"
_MONITOR_PERIOD = 1.0

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# Ray lets these override the address a client is given; ours must win.
_ADDRESS_VARS = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
_env_lock = threading.Lock()


@contextlib.contextmanager
def ray_errors(action: str) -> Iterator[None]:
    """Translate whatever Ray's Jobs client raises into :class:`RayError`.

    Examples:
        >>> with ray_errors("list jobs"):
        ...     raise ConnectionError("refused")
        Traceback (most recent call last):
        rl_lustre.errors.RayError: cannot list jobs: refused
    """
    try:
        yield
    except RayError:
        raise
    except Exception as exc:  # the Jobs SDK raises bare RuntimeError, ValueError, ...
        raise RayError(f"cannot {action}: {_summary(exc)}") from exc


def _summary(exc: BaseException) -> str:
    """The message of ``exc``; of a server-side traceback, its first and last lines."""
    message = str(exc).strip() or type(exc).__name__
    if "Traceback (most recent call last)" not in message:
        return message
    lines = [line.strip() for line in message.splitlines() if line.strip() not in ("", ".")]
    return f"{lines[0].split('Traceback')[0].strip()} {lines[-1]}".strip()


# Ray's Jobs client logs every package it uploads at INFO through a handler of its own
# ("dashboard_sdk.py:371 -- Uploading package gcs://_ray_pkg_....zip"): noise in a user's
# terminal on every submit. These loggers' INFO lines pass only when rl_lustre's own
# logging is at DEBUG (``rl-lustre -vv``, or ``logging.getLogger("rl_lustre").setLevel(logging.DEBUG)``).
RAY_UPLOAD_LOGGERS = ("ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging")


class _UploadNoise(logging.Filter):
    """Lets Ray's upload lines through only when asked for; warnings and errors always."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or logging.getLogger("rl_lustre").isEnabledFor(logging.DEBUG)


_UPLOAD_FILTER = _UploadNoise()


def quiet_ray_uploads() -> None:
    """Hide the INFO lines of Ray's package uploads unless rl_lustre logs at DEBUG (idempotent).

    Examples:
        >>> quiet_ray_uploads()
        >>> import logging
        >>> record = logging.LogRecord("ray.dashboard.modules.dashboard_sdk", logging.INFO, "", 0,
        ...                            "Uploading package gcs://_ray_pkg_0.zip.", None, None)
        >>> logging.getLogger("ray.dashboard.modules.dashboard_sdk").filter(record)
        False
    """
    for name in RAY_UPLOAD_LOGGERS:
        ray_logger = logging.getLogger(name)
        if _UPLOAD_FILTER not in ray_logger.filters:
            ray_logger.addFilter(_UPLOAD_FILTER)


@public("rl_lustre")
@attrs.frozen
class JobInfo:
    """What the Jobs API reports about one job.

    Attributes:
        submission_id: the id it was submitted under.
        status: ``PENDING``, ``RUNNING``, ``SUCCEEDED``, ``FAILED`` or ``STOPPED``.
        message: Ray's explanation of the status.
        entrypoint: the shell command.
        metadata: the submission's metadata.
        start_time: seconds since the epoch, if started.
        end_time: seconds since the epoch, if ended.
        from_records: told by the run's records on the volume (its head lost it), not by Ray.
    """

    submission_id: str
    status: str
    message: str = ""
    entrypoint: str = attrs.field(default="", repr=False)
    metadata: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    start_time: float | None = None
    end_time: float | None = None
    # Told by the run's records on the volume, not by a head (whose job table lost the run).
    from_records: bool = attrs.field(default=False, repr=False)

    @property
    def terminal(self) -> bool:
        """The job will not change status again."""
        return self.status in TERMINAL

    @classmethod
    def _from_ray(cls, details: Any) -> JobInfo:
        def seconds(ms: int | None) -> float | None:
            return None if ms is None else ms / 1000

        return cls(
            submission_id=details.submission_id or details.job_id or "",
            status=str(details.status),
            message=details.message or "",
            entrypoint=details.entrypoint,
            metadata=dict(details.metadata or {}),
            start_time=seconds(details.start_time),
            end_time=seconds(details.end_time),
        )


class JobsClient:
    """The Jobs API of one Ray cluster.

    The underlying ``JobSubmissionClient`` is created on first use and kept.

    Examples:
        >>> jobs = JobsClient("http://127.0.0.1:8265", headers={"Authorization": "Bearer ..."})
        >>> jobs.submit("echo hi", submission_id="hello")  # doctest: +SKIP
        'hello'

    Args:
        address: the dashboard URL, ``http://host:port``.
        headers: sent with every request (the bearer token when Ray auth is on).
            Without an ``Authorization`` header, none is sent, whatever Ray's token
            settings in this process (``RAY_AUTH_MODE``, ``~/.ray/auth_token``) say: they
            belong to other clusters.
        gone: asked after a call fails: a sentence saying why the cluster is known to be
            gone for good (a local head that was stopped), or None. With one, the call
            raises :class:`~rl_lustre.errors.NotReadyError` saying so, which waits and
            follows do not retry, instead of the connection error.
        relocate: asked after a call fails: the address and headers of the cluster's head
            now (a local head that was lost and replaced listens elsewhere), or None. The
            next call goes there.
    """

    def __init__(
        self,
        address: str,
        *,
        headers: Mapping[str, str] | None = None,
        gone: Callable[[], str | None] | None = None,
        relocate: Callable[[], tuple[str, Mapping[str, str]] | None] | None = None,
    ) -> None:
        self.address = address
        self._gone = gone
        self._relocate = relocate
        self._headers = dict(headers or {})
        if not any(name.lower() == "authorization" for name in self._headers):
            # Ray's client adds (or, finding none, fails for want of) this process's own
            # token unless the caller sets the header; an empty one means "no credentials".
            self._headers["Authorization"] = ""
        self._client: JobSubmissionClient | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JobsClient({self.address!r})"

    @property
    def headers(self) -> dict[str, str]:
        """The headers every request carries (for other APIs of the same dashboard)."""
        return {k: v for k, v in self._headers.items() if v}

    @contextlib.contextmanager
    def _calls(self, action: str) -> Iterator[None]:
        """:func:`ray_errors`, and a :class:`NotReadyError` for a cluster known to be gone."""
        try:
            with ray_errors(action):
                yield
        except RayError as exc:
            self._moved()
            why = self._gone() if self._gone is not None else None
            if why is None:
                raise
            raise NotReadyError(f"cannot {action}: {why}") from exc

    def _moved(self) -> None:
        """After a failed call: follow the head to where it listens now, if it moved."""
        where = self._relocate() if self._relocate is not None else None
        if where is None or where[0] == self.address:
            return
        logger.info("the Ray head moved from %s to %s", self.address, where[0])
        with self._lock:
            self.address, self._client = where[0], None
            self._headers = {**dict(where[1])} or {"Authorization": ""}

    def _sdk(self) -> JobSubmissionClient:
        with self._lock:
            if self._client is None:
                quiet_ray_uploads()
                with self._calls(f"connect to the Ray Jobs API at {self.address}"):
                    self._client = _connect(self.address, self._headers)
            return self._client

    def version(self) -> str:
        """The Ray version the cluster runs."""
        sdk = self._sdk()
        with self._calls("read the cluster's Ray version"):
            return sdk.get_version()

    def submit(
        self,
        entrypoint: str,
        *,
        submission_id: str,
        runtime_env: Mapping[str, Any] | None = None,
        metadata: Mapping[str, str] | None = None,
        entrypoint_memory: int | None = None,
    ) -> str:
        """Submit ``entrypoint``; returns the submission id. With ``entrypoint_memory``
        (bytes), Ray runs the entrypoint on a node with that much memory free.

        Raises:
            RayError: the cluster refused, including when ``submission_id`` is taken.
        """
        sdk = self._sdk()
        more: dict[str, Any] = {} if entrypoint_memory is None else {"entrypoint_memory": int(entrypoint_memory)}
        with self._calls(f"submit job {submission_id}"):
            return sdk.submit_job(
                entrypoint=entrypoint,
                submission_id=submission_id,
                runtime_env=dict(runtime_env or {}),
                metadata=dict(metadata or {}),
                **more,
            )

    def info(self, submission_id: str) -> JobInfo | None:
        """The job's status and details, or None when the cluster has no such job."""
        sdk = self._sdk()
        try:
            with self._calls(f"read job {submission_id}"):
                return JobInfo._from_ray(sdk.get_job_info(submission_id))
        except RayError as exc:
            if "does not exist" in str(exc):
                return None
            raise

    def list(self) -> list[JobInfo]:
        """Every job the cluster knows, in any status."""
        sdk = self._sdk()
        with self._calls("list jobs"):
            return [JobInfo._from_ray(d) for d in sdk.list_jobs()]

    def logs(self, submission_id: str) -> str:
        """The job's whole log so far."""
        sdk = self._sdk()
        with self._calls(f"read the logs of job {submission_id}"):
            return sdk.get_job_logs(submission_id)

    def stop(self, submission_id: str) -> bool:
        """Ask the job to stop; False if it had already ended."""
        sdk = self._sdk()
        with self._calls(f"stop job {submission_id}"):
            return bool(sdk.stop_job(submission_id))

    def delete(self, submission_id: str) -> bool:
        """Forget an ended job (its record and stored data); False when there was no such job.

        Raises:
            RayError: the job has not ended, or the cluster refused.
        """
        sdk = self._sdk()
        try:
            with self._calls(f"delete job {submission_id}"):
                return bool(sdk.delete_job(submission_id))
        except RayError as exc:
            if "does not exist" in str(exc):
                return False
            raise

    def run(
        self,
        entrypoint: str,
        *,
        submission_id: str,
        metadata: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        runtime_env: Mapping[str, Any] | None = None,
    ) -> tuple[JobInfo, str]:
        """Run a short command as a job, wait for its end, and forget it: ``(info, log)``.

        For helper commands that read something on the cluster. The job is deleted
        afterwards (stopped first, if the wait ran out), so it does not linger in the job
        list; should that fail, it stays, under its own ``submission_id``.

        Examples:
            >>> info, log = jobs.run("echo hi", submission_id="rl-lustre-echo-1")  # doctest: +SKIP
            >>> info.status, log  # doctest: +SKIP
            ('SUCCEEDED', 'hi\\n')

        Raises:
            WaitTimeoutError: the command had not ended after ``timeout`` seconds.
            RayError: the cluster refused it.
        """
        self.submit(entrypoint, submission_id=submission_id, metadata=metadata, runtime_env=runtime_env)
        deadline = time.monotonic() + timeout
        delay = 0.1
        try:
            while not (info := self._must_info(submission_id)).terminal:
                if time.monotonic() >= deadline:
                    raise WaitTimeoutError(f"job {submission_id}", timeout, info.status)
                time.sleep(delay)
                delay = min(delay * 1.5, 1.0)
            return info, self.logs(submission_id)
        finally:
            self._forget(submission_id)

    def _must_info(self, submission_id: str) -> JobInfo:
        info = self.info(submission_id)
        if info is None:
            raise RayError(f"job {submission_id} disappeared from the cluster")
        return info

    def _forget(self, submission_id: str) -> None:
        """Delete a helper job, stopping it first if it still runs; failures are only logged."""
        try:
            info = self.info(submission_id)
            if info is not None and not info.terminal:
                self.stop(submission_id)
                deadline = time.monotonic() + 10.0
                while not self._must_info(submission_id).terminal and time.monotonic() < deadline:
                    time.sleep(0.2)
            # Ray's job monitor pings the job's supervisor actor about once a second until it
            # sees it dead; a job deleted before then comes back as FAILED ("Job supervisor
            # actor died"). So: wait for the actor's death, give the monitor a period to see
            # it, delete, and delete again should it come back all the same.
            self._wait_supervisor_dead(submission_id, timeout=10.0)
            time.sleep(_MONITOR_PERIOD + 0.5)
            deadline = time.monotonic() + 10.0
            quiet_since = None
            while time.monotonic() < deadline:
                if self.info(submission_id) is not None:
                    self.delete(submission_id)
                    quiet_since = None
                elif quiet_since is None:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= _MONITOR_PERIOD:
                    break
                time.sleep(0.25)
        except RLLustreError as exc:
            logger.warning("helper job %s stays in the job list: %s", submission_id, exc)

    def _wait_supervisor_dead(self, submission_id: str, timeout: float) -> None:
        """Until Ray's state API shows the job's supervisor actor dead (or cannot say)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                response = self._sdk()._do_request(
                    "GET",
                    "/api/v0/actors",
                    timeout=10,
                    params={
                        "filter_keys": "name",
                        "filter_predicates": "=",
                        "filter_values": _SUPERVISOR_ACTOR.format(submission_id),
                        "detail": "false",
                    },
                )
                actors = response.json()["data"]["result"]["result"] if response.status_code == 200 else None
            except Exception as exc:  # an older or a restricted dashboard: fall back on the re-deletes
                logger.debug("cannot read the supervisor actor of %s: %s", submission_id, exc)
                return
            if actors is None or all(a.get("state") == "DEAD" for a in actors):
                return
            time.sleep(0.2)

    def follow(self, submission_id: str, *, outage_budget: OutageBudget | None = None) -> Iterator[str]:
        """The job's log from the start, line by line, until the job ends.

        Streams over the Jobs API's websocket. A stream that breaks while the job runs
        (close code 1006 from a dropped port-forward, an unreachable head) is opened
        again; the Jobs API sends the log from its start, so what was already returned
        is skipped: no line twice, none missing. Retries back off, are logged, and stop
        after ``outage_budget.max_outage`` seconds of continuous failure. Closing the
        iterator early (``break``) closes the stream.

        Examples:
            >>> for line in jobs.follow("hello"):  # doctest: +SKIP
            ...     print(line)

        Raises:
            RayError: the job could not be followed for longer than the outage budget.
            NotReadyError: the cluster is gone for good (see ``gone``).
        """
        outage = Outage(outage_budget or OutageBudget(), f"following the logs of job {submission_id}")
        delivered = 0  # characters of the log handed out (complete lines and the pending part)
        pending = ""
        while True:
            skip = delivered
            try:
                for chunk in _LogStream(self._sdk(), submission_id).chunks():
                    if skip:
                        cut = min(skip, len(chunk))
                        chunk, skip = chunk[cut:], skip - cut
                        if not chunk:
                            continue
                    delivered += len(chunk)
                    pending += chunk
                    *complete, pending = pending.split("\n")
                    outage.ok()
                    yield from complete
                info = self.info(submission_id)
            except RayError as exc:
                self._moved()
                why = self._gone() if self._gone is not None else None
                if why is not None:
                    raise NotReadyError(f"cannot follow the logs of job {submission_id}: {why}") from exc
                if self._unknown(submission_id):
                    break  # a head that does not know the job (a new one, after a loss): nothing more to follow
                outage.failed(exc)
                continue
            if info is None or info.terminal:
                break
            # The stream ended while the job runs: it was cut, not finished.
            outage.failed(RayError(f"the log stream of job {submission_id} ended while the job is {info.status}"))
        if pending:
            yield pending

    def _unknown(self, submission_id: str) -> bool:
        """Whether the head answers and knows no job ``submission_id``."""
        try:
            return self.info(submission_id) is None
        except RLLustreError:
            return False


def _connect(address: str, headers: dict[str, str]) -> JobSubmissionClient:
    from ray.job_submission import JobSubmissionClient

    with _env_lock:
        # Ray's client prefers $RAY_ADDRESS over the address it is given; a user's
        # RAY_ADDRESS must not send our jobs to another cluster.
        saved = {name: os.environ.pop(name) for name in _ADDRESS_VARS if name in os.environ}
        try:
            # Plain http has no certificate to verify; saying so keeps Ray's websocket
            # call off aiohttp's deprecated ssl=None.
            return JobSubmissionClient(address, headers=dict(headers), verify=not address.startswith("http://"))
        finally:
            os.environ.update(saved)


_DONE = object()


class _LogStream:
    """``tail_job_logs`` (an async generator) consumed from sync code: an event loop
    in a thread puts chunks on a queue; cancelling the task ends the stream early."""

    def __init__(self, sdk: JobSubmissionClient, submission_id: str) -> None:
        self._sdk = sdk
        self._id = submission_id
        self._queue: queue.Queue[Any] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = threading.Event()

    def chunks(self) -> Iterator[str]:
        """The log's text as the Jobs API sends it, until the stream ends."""
        thread = threading.Thread(target=self._run, name=f"rl_lustre-logs-{self._id}", daemon=True)
        thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    with ray_errors(f"follow the logs of job {self._id}"):
                        raise item
                yield item
        finally:
            self._cancel()
            thread.join(timeout=5)

    def _run(self) -> None:
        async def pump() -> None:
            async for chunk in self._sdk.tail_job_logs(self._id):
                self._queue.put(chunk)

        loop = asyncio.new_event_loop()
        try:
            self._loop = loop
            self._task = loop.create_task(pump())
            self._ready.set()
            loop.run_until_complete(self._task)
            self._queue.put(_DONE)
        except asyncio.CancelledError:
            self._queue.put(_DONE)
        except BaseException as exc:
            self._queue.put(exc)
        finally:
            self._ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _cancel(self) -> None:
        self._ready.wait(timeout=5)
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(task.cancel)
