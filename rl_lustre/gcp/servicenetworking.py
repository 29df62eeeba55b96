"""Private services access: the Service Networking connection (VPC peering) that lets
Managed Lustre reach the VPC through the reserved PSA range.

There is no Google client library for this API, so it is plain REST through an
authorised ``requests`` session. A network has one connection to
``servicenetworking.googleapis.com``, possibly shared with other services (Cloud SQL,
Memorystore, ...), so ownership is per range: :meth:`PsaConnections.create` adds our
range to the connection (creating it if needed) and :meth:`PsaConnections.delete`
removes only our range, deleting the connection only when no other range is left.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import NotFoundError
from . import _clients
from ._errors import SERVICE_NETWORKING, Call, RetryPolicy, call, operation_error
from ._ownership import Ensured
from ._wait import Backoff, ProgressCallback, wait_for
from .compute import Projects

log = logging.getLogger("rl_lustre.gcp.servicenetworking")

SERVICE = "servicenetworking.googleapis.com"
PEERING = "servicenetworking-googleapis-com"
KIND = "private services access connection"
TIMEOUT = 15 * 60.0


def connection_name(project: str, network: str) -> str:
    """The name rl_lustre reports for the connection: that of the VPC peering it creates.

    Examples:
        >>> connection_name("my-project", "demo-net")
        'projects/my-project/global/networks/demo-net/peerings/servicenetworking-googleapis-com'
    """
    return f"projects/{project}/global/networks/{network}/peerings/{PEERING}"


class PsaConnections:
    """Service Networking connections of VPC networks.

    Example::

        conns = PsaConnections()          # a session from the environment, on first use
        conns.create("my-project", "demo-net", "demo-psa")
        # Ensured(name='projects/my-project/global/networks/demo-net/peerings/...', adopted=False, ...)

    Args:
        session: an authorised ``requests.Session``; by default one for this environment
            (the REST emulator's when ``RL_LUSTRE_GCP_REST_EMULATOR`` is set).
        base_url: the API's base URL, with ``session``.
        projects: finds the project number the API wants.
        backoff: polling delays of waits.
        retry: retries of transient failures.
    """

    def __init__(
        self,
        session: Any = None,
        *,
        base_url: str = _clients.SERVICE_NETWORKING_URL,
        projects: Projects | None = None,
        backoff: Backoff | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._session = session
        self._base_url = base_url
        self._projects = projects or Projects(retry=retry)
        self._backoff = backoff
        self._retry = retry

    def _http(self) -> tuple[Any, str]:
        if self._session is not None:
            return self._session, self._base_url
        return _clients.http_session("servicenetworking", _clients.SERVICE_NETWORKING_URL)

    def _request(self, action: str, resource: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        session, base = self._http()

        def send() -> dict[str, Any]:
            response = session.request(method, f"{base}/v1/{path}", timeout=60, **kwargs)
            response.raise_for_status()
            return response.json() if response.content else {}

        return call(Call(SERVICE_NETWORKING, action, resource), send, policy=self._retry)

    def network_ref(self, project: str, network: str) -> str:
        """``projects/NUMBER/global/networks/NAME``: the form this API wants."""
        return f"projects/{self._projects.number(project)}/global/networks/{network}"

    def get_or_none(self, project: str, network: str) -> dict[str, Any] | None:
        """The network's connection to ``servicenetworking.googleapis.com``, or None.

        Example::

            PsaConnections().get_or_none("my-project", "demo-net")
            # {'network': 'projects/123/global/networks/demo-net', 'reservedPeeringRanges': ['demo-psa'], ...}
        """
        ref = self.network_ref(project, network)
        try:
            found = self._request(
                "get",
                f"{KIND} {connection_name(project, network)}",
                "GET",
                f"services/{SERVICE}/connections",
                params={"network": ref},
            )
        except NotFoundError:
            return None
        for conn in found.get("connections", []):
            if conn.get("service", f"services/{SERVICE}") == f"services/{SERVICE}":
                return dict(conn)
        return None

    def create(
        self,
        project: str,
        network: str,
        range_name: str,
        *,
        wait: bool = True,
        timeout: float = TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> Ensured[dict[str, Any]]:
        """Connect ``network`` to Service Networking through ``range_name``.

        A connection that already lists the range is adopted; one that exists without
        it gets the range added (its other ranges are kept).

        Example::

            PsaConnections().create("my-project", "demo-net", "demo-psa").adopted
            # False

        Raises:
            OperationFailedError: the operation failed.
            WaitTimeoutError: not done within ``timeout``.
        """
        name = connection_name(project, network)
        ref = self.network_ref(project, network)
        existing = self.get_or_none(project, network)
        ranges = list(existing.get("reservedPeeringRanges", [])) if existing else []
        if existing is not None and range_name in ranges:
            log.info("adopting %s %s (ranges %s)", KIND, name, ", ".join(ranges))
            return Ensured(name, True, existing)
        body = {"network": ref, "reservedPeeringRanges": [*ranges, range_name]}
        if existing is None:
            log.info("creating %s %s with range %s", KIND, name, range_name)
            op = self._request("create", f"{KIND} {name}", "POST", f"services/{SERVICE}/connections", json=body)
        else:
            log.info("adding range %s to %s %s", range_name, KIND, name)
            op = self._request(
                "update",
                f"{KIND} {name}",
                "PATCH",
                f"services/{SERVICE}/connections/{PEERING}",
                params={"updateMask": "reservedPeeringRanges", "force": "false"},
                json=body,
            )
        if not wait:
            return Ensured(name, False, body)
        self.wait_operation(op, name=name, action="connect", timeout=timeout, progress=progress)
        found = self.get_or_none(project, network)
        if found is None:
            raise NotFoundError(f"{SERVICE_NETWORKING}: {KIND} {name} is missing after it was created")
        return Ensured(name, False, found)

    def wait_ready(
        self,
        project: str,
        network: str,
        range_name: str,
        *,
        timeout: float = TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Wait until the network's connection lists ``range_name``, and return it.

        Example::

            PsaConnections().wait_ready("my-project", "demo-net", "demo-psa")["peering"]
            # 'servicenetworking-googleapis-com'
        """

        def describe(conn: dict[str, Any] | None) -> str:
            return "ABSENT" if conn is None else "ranges " + ", ".join(conn.get("reservedPeeringRanges", []))

        found = wait_for(
            f"{KIND} {connection_name(project, network)} to list {range_name}",
            lambda: self.get_or_none(project, network),
            done=lambda c: c is not None and range_name in c.get("reservedPeeringRanges", []),
            describe=describe,
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )
        assert found is not None
        return found

    def delete(
        self,
        project: str,
        network: str,
        range_name: str,
        *,
        wait: bool = True,
        timeout: float = TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> bool:
        """Take ``range_name`` out of the network's connection; delete the connection if
        no range is left. Ranges of others are never touched.

        Example::

            PsaConnections().delete("my-project", "demo-net", "demo-psa")
            # True

        Returns:
            True if something was changed; False if the connection or our range was not there.
        """
        name = connection_name(project, network)
        existing = self.get_or_none(project, network)
        ranges = list(existing.get("reservedPeeringRanges", [])) if existing else []
        if existing is None or range_name not in ranges:
            log.debug("%s %s has no range %s", KIND, name, range_name)
            return False
        ref = self.network_ref(project, network)
        rest = [r for r in ranges if r != range_name]
        if rest:
            log.info("removing range %s from %s %s (keeping %s)", range_name, KIND, name, ", ".join(rest))
            op = self._request(
                "update",
                f"{KIND} {name}",
                "PATCH",
                f"services/{SERVICE}/connections/{PEERING}",
                params={"updateMask": "reservedPeeringRanges", "force": "true"},
                json={"network": ref, "reservedPeeringRanges": rest},
            )
        else:
            log.info("deleting %s %s", KIND, name)
            op = self._request(
                "delete",
                f"{KIND} {name}",
                "POST",
                f"services/{SERVICE}/connections/{PEERING}:deleteConnection",
                json={"consumerNetwork": ref},
            )
        if wait:
            self.wait_operation(op, name=name, action="disconnect", timeout=timeout, progress=progress)
        return True

    def wait_operation(
        self,
        op: dict[str, Any],
        *,
        name: str,
        action: str,
        timeout: float = TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Poll ``GET v1/operations/...`` until the operation is done.

        Raises:
            OperationFailedError: it finished with an error.
            WaitTimeoutError: not done within ``timeout``; carries its last state.
        """
        op_name = op.get("name", "")

        def poll() -> dict[str, Any]:
            if op.get("done") or not op_name:
                return op
            return self._request(f"poll the operation {op_name} of", f"{KIND} {name}", "GET", op_name)

        done = wait_for(
            f"{KIND} {name} to {action}",
            poll,
            done=lambda o: bool(o.get("done")) or not op_name,
            describe=lambda o: "done" if o.get("done") else "running",
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )
        error = done.get("error")
        if error:
            raise operation_error(
                Call(SERVICE_NETWORKING, action, f"{KIND} {name}"),
                error.get("message", "unknown error"),
                code=error.get("code"),
            )
        return done
