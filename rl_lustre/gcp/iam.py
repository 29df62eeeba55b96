"""The nodes' service account (IAM Admin API, ``google.cloud.iam_admin_v1``, gRPC) and its
roles on the project (the project's IAM policy, ``google.cloud.resourcemanager_v3``, gRPC).

Service accounts have no labels: ownership is written into the account's description
(``[managed-by=rl-lustre rl-lustre-deployment=NAME]``, as for Compute networking) and read
back from there; an account without it is never adopted or deleted. Nor do they have a
creation time: :meth:`ServiceAccounts.create` writes it into the description too
(``(created 2026-12-03T08:50:00Z)``, :func:`created_of`), so that ``rl-lustre gc`` can
leave a deployment whose ``up()`` is under way alone.

A role is granted by a read-modify-write of the whole project policy guarded by its etag:
a concurrent change makes the write fail (ABORTED), and the policy is read again. Only our
member is added to, or removed from, the roles we grant; every other binding and member is
written back as read.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from .. import naming
from ..errors import GCPError, NotFoundError
from . import _clients
from ._errors import (
    DEFAULT_RETRY,
    IAM,
    RESOURCE_MANAGER,
    Call,
    RetryPolicy,
    call,
    is_foreign,
    is_transient,
    translate,
)
from ._ownership import Ensured, describe_ownership, is_ours, labels_from_description
from ._resource import OwnedResource
from ._wait import Backoff, ProgressCallback, default_backoff, wait_for

__all__ = ["ProjectIam", "ServiceAccounts", "account_path", "created_of"]

log = logging.getLogger("rl_lustre.gcp.iam")

# A new account can take seconds to be readable everywhere (IAM is eventually consistent).
VISIBLE_TIMEOUT = 120.0


_CREATED = re.compile(r"\(created (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\)")


def created_of(account: Any) -> datetime.datetime | None:
    """When ``account`` was created (UTC), as :meth:`ServiceAccounts.create` wrote it into
    its description; None for an account without it.

    Examples:
        >>> from types import SimpleNamespace
        >>> created_of(SimpleNamespace(description="GKE nodes (created 2026-12-03T08:50:00Z) [managed-by=rl-lustre]"))
        datetime.datetime(2026, 12, 3, 8, 50, tzinfo=datetime.timezone.utc)
        >>> created_of(SimpleNamespace(description="made by hand")) is None
        True
    """
    m = _CREATED.search(account.description or "")
    if m is None:
        return None
    return datetime.datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def account_path(project: str, email: str) -> str:
    """``projects/P/serviceAccounts/EMAIL``: a service account's full resource name.

    Examples:
        >>> account_path("my-project", "rl-demo-nodes@my-project.iam.gserviceaccount.com")
        'projects/my-project/serviceAccounts/rl-demo-nodes@my-project.iam.gserviceaccount.com'
    """
    return f"projects/{project}/serviceAccounts/{email}"


class ServiceAccounts(OwnedResource):
    """Service accounts (``iam_admin_v1.IAMClient``); they need roles/iam.serviceAccountAdmin.

    Example::

        ServiceAccounts().create("my-project", "rl-demo-nodes", display_name="rl_lustre nodes of demo",
                                 text="GKE nodes of rl_lustre deployment demo", deployment="demo")
    """

    api = IAM
    _log = log

    def __init__(self, client: Any = None, *, backoff: Backoff | None = None, retry: RetryPolicy | None = None) -> None:
        self._client = client
        self._backoff = backoff
        self._retry = retry

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else _clients.iam_admin()

    @property
    def kind(self) -> str:
        return "IAM service account"

    def _labels_of(self, found: Any) -> Mapping[str, str]:
        return labels_from_description(found.description)

    def _call(self, action: str, name: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        return call(Call(self.api, action, f"{self.kind} {name}"), fn, policy=self._retry, retry=None, **kwargs)

    def get_or_none(self, name: str) -> Any:
        """The account ``projects/P/serviceAccounts/EMAIL``, or None."""
        try:
            return self._call("get", name, self.client.get_service_account, request={"name": name})
        except NotFoundError:
            return None

    def wait_ready(
        self, name: str, *, timeout: float = VISIBLE_TIMEOUT, progress: ProgressCallback | None = None
    ) -> Any:
        """The account once it can be read (a new one may take a moment)."""
        return wait_for(
            f"{self.kind} {name} to be readable",
            lambda: self.get_or_none(name),
            done=lambda found: found is not None,
            describe=lambda f: "ABSENT" if f is None else "ACTIVE",
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )

    def create(self, project: str, account_id: str, *, display_name: str, text: str, deployment: str) -> Ensured[Any]:
        """Create the account ``account_id`` of ``project`` with our labels and the time in
        its description (after ``text``), or adopt it if it already carries the labels.

        Raises:
            OwnershipError: it exists without our labels (or with another deployment's).
        """
        from google.cloud import iam_admin_v1

        now = datetime.datetime.now(datetime.timezone.utc)
        body = iam_admin_v1.ServiceAccount(
            display_name=display_name,
            description=describe_ownership(deployment, f"{text} (created {now:%Y-%m-%dT%H:%M:%SZ})"),
        )
        name = account_path(project, naming.service_account_email(project, account_id))
        request = iam_admin_v1.CreateServiceAccountRequest(
            name=f"projects/{project}", account_id=account_id, service_account=body
        )
        return self._create_or_adopt(
            name,
            body,
            deployment=deployment,
            send=lambda: self._call("create", name, self.client.create_service_account, request=request),
            await_op=lambda op: None,
            wait=True,
            timeout=VISIBLE_TIMEOUT,
            progress=None,
        )

    def delete(self, name: str, *, deployment: str) -> bool:
        """Delete the account if it exists and carries ``deployment``'s labels.

        Returns:
            True if it was deleted, False if it did not exist.

        Raises:
            OwnershipError: it exists without our labels.
        """
        return self._delete_if_ours(
            name,
            deployment=deployment,
            send=lambda: self._call("delete", name, self.client.delete_service_account, request={"name": name}),
            await_op=lambda op: None,
            wait=True,
            timeout=0.0,
            progress=None,
        )

    def list_ours(self, project: str) -> list[Any]:
        """Every account of ``project`` whose description carries our labels."""
        pages = self._call(
            "list", f"of project {project}", self.client.list_service_accounts, request={"name": f"projects/{project}"}
        )
        return [a for a in pages if is_ours(labels_from_description(a.description))]


class ProjectIam:
    """Roles of one member on a project (``resourcemanager_v3.ProjectsClient``); they need
    roles/resourcemanager.projectIamAdmin.

    Example::

        ProjectIam().add("my-project", "serviceAccount:rl-demo-nodes@my-project.iam.gserviceaccount.com",
                         ["roles/container.defaultNodeServiceAccount"])
    """

    # The member of a deleted account, in bindings that outlived it: ``deleted:<member>?uid=N``.
    _DELETED: ClassVar[str] = "deleted:{member}?uid="

    def __init__(self, client: Any = None, *, backoff: Backoff | None = None, retry: RetryPolicy | None = None) -> None:
        self._client = client
        self._backoff = backoff
        self._retry = retry

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else _clients.projects()

    def _read(self, project: str) -> Any:
        # Version 3: conditional bindings come back whole, and are written back whole.
        return call(
            Call(RESOURCE_MANAGER, "get the IAM policy of", f"project {project}"),
            self.client.get_iam_policy,
            policy=self._retry,
            request={"resource": f"projects/{project}", "options": {"requested_policy_version": 3}},
            retry=None,
        )

    def roles_of(self, project: str, member: str) -> list[str]:
        """The roles ``member`` holds on ``project`` without a condition."""
        return sorted(
            b.role for b in self._read(project).bindings if member in b.members and not b.HasField("condition")
        )

    def add(self, project: str, member: str, roles: Sequence[str]) -> bool:
        """Grant ``roles`` to ``member`` on ``project`` (no condition); True if the policy changed."""

        def change(policy: Any) -> bool:
            changed = False
            for role in roles:
                binding = next((b for b in policy.bindings if b.role == role and not b.HasField("condition")), None)
                if binding is None:
                    binding = policy.bindings.add(role=role)
                if member not in binding.members:
                    binding.members.append(member)
                    changed = True
            return changed

        return self._modify(project, member, f"grant {', '.join(roles)} to {member}", change)

    def remove(self, project: str, member: str, roles: Sequence[str]) -> bool:
        """Take ``roles`` (those without a condition) from ``member`` on ``project``, and from
        what is left of it once its account is deleted; other members and roles stay as they
        are. True if the policy changed."""
        dead = self._DELETED.format(member=member)

        def change(policy: Any) -> bool:
            changed = False
            for binding in list(policy.bindings):
                if binding.role not in roles or binding.HasField("condition"):
                    continue
                keep = [m for m in binding.members if m != member and not m.startswith(dead)]
                if len(keep) != len(binding.members):
                    changed = True
                    del binding.members[:]
                    binding.members.extend(keep)
                if not keep:
                    policy.bindings.remove(binding)
            return changed

        return self._modify(project, member, f"remove {', '.join(roles)} from {member}", change)

    def _modify(self, project: str, member: str, what: str, change: Callable[[Any], bool]) -> bool:
        """Read the policy, ``change`` it, write it back with the etag read; read again after
        a concurrent change (ABORTED), a transient failure, or a member IAM does not know yet."""
        target = Call(RESOURCE_MANAGER, what, f"on project {project}")
        attempts = (self._retry or DEFAULT_RETRY).attempts
        delays = (self._backoff or default_backoff()).delays()
        # A new account may stay unknown to the policy for a while: that is waited out
        # (up to VISIBLE_TIMEOUT) without counting as a failed attempt.
        deadline = time.monotonic() + VISIBLE_TIMEOUT
        attempt = 0
        while True:
            policy = self._read(project)
            if not change(policy):
                log.debug("project %s: nothing to %s", project, what)
                return False
            try:
                self.client.set_iam_policy(request={"resource": f"projects/{project}", "policy": policy}, retry=None)
            except Exception as exc:
                if not is_foreign(exc):
                    raise
                unknown = _not_known_yet(exc, member) and time.monotonic() < deadline
                attempt += 0 if unknown else 1
                if not (unknown or is_transient(exc)):
                    raise translate(exc, target, attempts=attempt) from exc
                if attempt >= attempts:
                    raise GCPError(
                        f"{RESOURCE_MANAGER}: could not {what} on project {project}: the policy kept "
                        f"changing or the write kept failing ({attempts} attempts); retry. ({exc})"
                    ) from exc
                log.info(
                    "project %s: the IAM policy write to %s failed (%s); reading it again",
                    project,
                    what,
                    type(exc).__name__,
                )
                time.sleep(next(delays))
                continue
            log.info("project %s: %s", project, what)
            return True


def _not_known_yet(exc: BaseException, member: str) -> bool:
    """IAM refusing ``member``, whose account was created moments ago (eventual consistency)."""
    email = member.partition(":")[2]
    return bool(email) and f"{email} does not exist" in str(exc)
