"""The fake IAM Admin API (``google.iam.admin.v1.IAM``: service accounts) and the project IAM
policy of Resource Manager (``google.cloud.resourcemanager.v3.Projects``: ``GetIamPolicy`` /
``SetIamPolicy`` with etags), on the fakes' gRPC server.

What it keeps of the real services' behaviour:

- an account id is 6-30 characters ``[a-z][a-z0-9-]{4,28}[a-z0-9]``; its e-mail is
  ``ID@PROJECT.iam.gserviceaccount.com``; a taken id is ALREADY_EXISTS;
- ``SetIamPolicy`` with an etag other than the policy's current one is ABORTED (a
  concurrent change: the caller reads again), one without an etag overwrites; a member
  ``serviceAccount:E`` that does not exist, or not yet (``latency["iam.create_service_account"]``
  after its creation), is INVALID_ARGUMENT;
- deleting an account turns its members in the project policy into
  ``deleted:serviceAccount:E?uid=N``, as IAM does (the bindings stay until removed);
- conditional bindings are kept apart from the role's unconditional one, with their
  condition. ``GetIamPolicy`` returns them only to a caller that asks for policy version 3
  (the policy then says version 3); to others it shows them as IAM does, as roles
  ``ROLE_withcond_HASH`` without their condition, which ``SetIamPolicy`` refuses, as it
  refuses a conditional binding in a policy below version 3 (INVALID_ARGUMENT).

:meth:`IamFake.concurrent_change` plays another administrator editing the policy between
our read and our write; :meth:`IamFake.users_of` tells who acts as an account (the GKE
node pools running as it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

import grpc
from google.cloud import iam_admin_v1
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf import empty_pb2
from google.type import expr_pb2

from ..gcp._ownership import labels_from_description
from ._core import Core, FakeError

__all__ = ["IamFake"]

IAM_SERVICE = "google.iam.admin.v1.IAM"
PROJECTS_SERVICE = "google.cloud.resourcemanager.v3.Projects"
_ACCOUNT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
_PROJECT = re.compile(r"projects/([^/]+)")
_ACCOUNT = re.compile(r"projects/([^/]+)/serviceAccounts/([^/]+)")
_WITHCOND = "_withcond_"
_PROJECT_ACCOUNT = re.compile(r"(?:deleted:)?serviceAccount:([^@]+)@([^.]+)\.iam\.gserviceaccount\.com(?:\?uid=\d+)?")


def _email(account_id: str, project: str) -> str:
    return f"{account_id}@{project}.iam.gserviceaccount.com"


# A binding's key in a project's policy: its role, and its condition (serialized; b"" for none).
_Key = tuple[str, bytes]


def _shown(key: _Key) -> str:
    """How tests see a binding: its role, and ``if EXPRESSION`` for a conditional one."""
    role, condition = key
    return f"{role} if {expr_pb2.Expr.FromString(condition).expression}" if condition else role


class IamFake:
    """Service accounts by e-mail and one IAM policy per project.

    Examples:
        >>> from rl_lustre.testing import FakeGCP
        >>> with FakeGCP() as gcp:
        ...     gcp.iam.seed_account("my-project", "rl-nodes")
        'rl-nodes@my-project.iam.gserviceaccount.com'
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        # e-mail -> account; project -> (etag number, (role, condition) -> members); the
        # ownership labels an account's description carried, kept after it is deleted (for
        # leaked bindings).
        self.accounts: dict[str, iam_admin_v1.ServiceAccount] = core.service_accounts
        self.policies: dict[str, tuple[int, dict[_Key, list[str]]]] = {}
        self.marked: dict[str, dict[str, str]] = {}
        self._concurrent: dict[str, list[tuple[str, str]]] = {}
        self._known_at: dict[str, float] = {}

    def register(self, server: Any) -> None:
        handlers: list[tuple[str, Callable[[Any], Any], Any, Any]] = [
            (
                "CreateServiceAccount",
                self.create_account,
                iam_admin_v1.CreateServiceAccountRequest,
                iam_admin_v1.ServiceAccount,
            ),
            ("GetServiceAccount", self.get_account, iam_admin_v1.GetServiceAccountRequest, iam_admin_v1.ServiceAccount),
            (
                "ListServiceAccounts",
                self.list_accounts,
                iam_admin_v1.ListServiceAccountsRequest,
                iam_admin_v1.ListServiceAccountsResponse,
            ),
            ("DeleteServiceAccount", self.delete_account, iam_admin_v1.DeleteServiceAccountRequest, empty_pb2.Empty),
        ]
        for method, fn, req, resp in handlers:
            server.add(IAM_SERVICE, method, f"iam.{method}", fn, req, resp)
        server.add(
            PROJECTS_SERVICE,
            "GetIamPolicy",
            "resourcemanager.GetIamPolicy",
            self.get_policy,
            iam_policy_pb2.GetIamPolicyRequest,
            policy_pb2.Policy,
        )
        server.add(
            PROJECTS_SERVICE,
            "SetIamPolicy",
            "resourcemanager.SetIamPolicy",
            self.set_policy,
            iam_policy_pb2.SetIamPolicyRequest,
            policy_pb2.Policy,
        )

    # -- for tests ----------------------------------------------------------------------

    def seed_account(self, project: str, account_id: str, *, description: str = "created by hand") -> str:
        """Make a service account exist (a user's own, unless ``description`` carries our
        labels); returns its e-mail."""
        with self.core.lock:
            return self._add(
                project, account_id, iam_admin_v1.ServiceAccount(display_name=account_id, description=description)
            ).email

    def bindings(self, project: str) -> dict[str, list[str]]:
        """The project policy's bindings: role (``ROLE if EXPRESSION`` for a conditional
        one) -> members."""
        with self.core.lock:
            return {_shown(key): list(members) for key, members in self.policies.get(project, (0, {}))[1].items()}

    def bind(self, project: str, role: str, member: str, *, condition: Mapping[str, str] | None = None) -> None:
        """Add ``member`` to ``role`` in the project policy, as another administrator would;
        with ``condition`` (``{"title": ..., "expression": ...}``), to that conditional binding."""
        with self.core.lock:
            self._bind(project, (role, expr_pb2.Expr(**condition).SerializeToString() if condition else b""), member)

    def concurrent_change(self, project: str, role: str, member: str) -> None:
        """Right after the next ``GetIamPolicy`` of ``project`` is answered, add ``member`` to
        ``role`` (unconditionally): the reader's etag is then stale, and its ``SetIamPolicy``
        is ABORTED."""
        with self.core.lock:
            self._concurrent.setdefault(project, []).append((role, member))

    def users_of(self, email: str) -> list[str]:
        """Who acts as the account: the GKE node pools whose nodes run as it."""
        with self.core.lock:
            return sorted(
                f"{name}/nodePools/{p.name}"
                for name, c in self.core.clusters.items()
                for p in c.node_pools
                if p.config.service_account == email
            )

    def resources(self) -> dict[str, dict[str, dict[str, str]]]:
        """What exists, as :meth:`FakeGCP.resources` shows it: accounts (their description's
        labels) and bindings ``projects/P ROLE MEMBER`` (the labels of the member's account)."""
        accounts = {a.name: labels_from_description(a.description) for a in self.accounts.values()}
        bindings: dict[str, dict[str, str]] = {}
        for project, (_, roles) in self.policies.items():
            for key, members in roles.items():
                role, condition = key
                for member in members:
                    m = _PROJECT_ACCOUNT.fullmatch(member)
                    labels = self.marked.get(_email(*m.groups()), {}) if m else {}
                    shown = f"projects/{project} {role} {member}"
                    if condition:
                        shown += f" if {expr_pb2.Expr.FromString(condition).expression}"
                    bindings[shown] = dict(labels)
        return {"iam.serviceAccounts": accounts, "iam.bindings": bindings}

    # -- handlers (under the core's lock) ------------------------------------------------

    def _add(self, project: str, account_id: str, body: iam_admin_v1.ServiceAccount) -> iam_admin_v1.ServiceAccount:
        if not _ACCOUNT_ID.fullmatch(account_id):
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid account id {account_id!r}: 6-30 characters [a-z][a-z0-9-]*[a-z0-9].",
            )
        email = _email(account_id, project)
        if email in self.accounts:
            raise FakeError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"Service account {account_id} already exists within project projects/{project}.",
            )
        uid = str(100_000_000_000_000_000_000 + self.core.next_id())
        account = iam_admin_v1.ServiceAccount(
            name=f"projects/{project}/serviceAccounts/{email}",
            project_id=project,
            unique_id=uid,
            email=email,
            display_name=body.display_name,
            description=body.description,
            oauth2_client_id=uid,
            etag=b"\x00" + uid.encode()[-6:],
        )
        self.accounts[email] = account
        self._known_at[email] = self.core.now() + self.core.delay("iam.create_service_account")
        labels = labels_from_description(body.description)
        if labels:
            self.marked[email] = labels
        return account

    def _account(self, name: str) -> iam_admin_v1.ServiceAccount:
        m = _ACCOUNT.fullmatch(name)
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"name {name!r} must be projects/P/serviceAccounts/EMAIL (P may be '-')",
            )
        found = self.accounts.get(m[2])
        if found is None or m[1] not in ("-", found.project_id):
            raise FakeError(grpc.StatusCode.NOT_FOUND, f"Unknown service account {m[2]}")
        return found

    def create_account(self, request: iam_admin_v1.CreateServiceAccountRequest) -> iam_admin_v1.ServiceAccount:
        m = _PROJECT.fullmatch(request.name)
        if m is None:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"name {request.name!r} must be projects/P")
        if len(request.service_account.description) > 256 or len(request.service_account.display_name) > 100:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT, "description is at most 256 characters, display name at most 100."
            )
        return self._add(m[1], request.account_id, request.service_account)

    def get_account(self, request: iam_admin_v1.GetServiceAccountRequest) -> iam_admin_v1.ServiceAccount:
        return self._account(request.name)

    def list_accounts(
        self, request: iam_admin_v1.ListServiceAccountsRequest
    ) -> iam_admin_v1.ListServiceAccountsResponse:
        m = _PROJECT.fullmatch(request.name)
        if m is None:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"name {request.name!r} must be projects/P")
        found = sorted((a for a in self.accounts.values() if a.project_id == m[1]), key=lambda a: a.email)
        start = int(request.page_token or 0)
        size = request.page_size or 100
        page = found[start : start + size]
        more = str(start + size) if start + size < len(found) else ""
        return iam_admin_v1.ListServiceAccountsResponse(accounts=page, next_page_token=more)

    def delete_account(self, request: iam_admin_v1.DeleteServiceAccountRequest) -> empty_pb2.Empty:
        account = self._account(request.name)
        del self.accounts[account.email]
        gone = f"serviceAccount:{account.email}"
        for project, (etag, roles) in list(self.policies.items()):
            if any(gone in members for members in roles.values()):
                for members in roles.values():
                    members[:] = [f"deleted:{gone}?uid={account.unique_id}" if x == gone else x for x in members]
                self.policies[project] = (etag + 1, roles)
        return empty_pb2.Empty()

    def _bind(self, project: str, key: _Key, member: str) -> None:
        etag, roles = self.policies.get(project, (1, {}))
        members = roles.setdefault(key, [])
        if member not in members:
            members.append(member)
        self.policies[project] = (etag + 1, roles)

    def _policy(self, project: str, version: int = 3) -> policy_pb2.Policy:
        """The policy as IAM returns it to a caller asking for ``version``: conditional
        bindings whole from version 3 on, below it as ``ROLE_withcond_HASH`` roles."""
        etag, roles = self.policies.get(project, (1, {}))
        bindings = []
        for (role, condition), members in sorted(roles.items()):
            if not members:
                continue
            if not condition:
                bindings.append(policy_pb2.Binding(role=role, members=sorted(members)))
            elif version >= 3:
                bindings.append(
                    policy_pb2.Binding(
                        role=role, members=sorted(members), condition=expr_pb2.Expr.FromString(condition)
                    )
                )
            else:
                digest = hashlib.sha256(condition).hexdigest()[:20]
                bindings.append(policy_pb2.Binding(role=f"{role}{_WITHCOND}{digest}", members=sorted(members)))
        conditional = version >= 3 and any(b.HasField("condition") for b in bindings)
        return policy_pb2.Policy(version=3 if conditional else 1, etag=f"BwY{etag:08d}".encode(), bindings=bindings)

    def get_policy(self, request: iam_policy_pb2.GetIamPolicyRequest) -> policy_pb2.Policy:
        m = _PROJECT.fullmatch(request.resource)
        if m is None:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"resource {request.resource!r} must be projects/P")
        answer = self._policy(m[1], request.options.requested_policy_version)
        for role, member in self._concurrent.pop(m[1], []):
            self._bind(m[1], (role, b""), member)
        return answer

    def set_policy(self, request: iam_policy_pb2.SetIamPolicyRequest) -> policy_pb2.Policy:
        m = _PROJECT.fullmatch(request.resource)
        if m is None:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"resource {request.resource!r} must be projects/P")
        project = m[1]
        current = self._policy(project)
        if request.policy.etag and request.policy.etag != current.etag:
            raise FakeError(
                grpc.StatusCode.ABORTED,
                "There were concurrent policy changes. Please retry the "
                "whole read-modify-write with exponential backoff.",
            )
        roles: dict[_Key, list[str]] = {}
        for binding in request.policy.bindings:
            if _WITHCOND in binding.role:
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Role {binding.role} is a conditional binding as a version 1 policy shows it; "
                    "read the policy with requested_policy_version 3 and write that.",
                )
            if binding.HasField("condition") and request.policy.version < 3:
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"The policy has a conditional binding of {binding.role}, and so must be "
                    f"version 3 (it is version {request.policy.version}).",
                )
            for member in binding.members:
                sa = _PROJECT_ACCOUNT.fullmatch(member)
                known = self._known_at.get(_email(*sa.groups()), 0.0) <= self.core.now() if sa else True
                if (
                    sa
                    and not member.startswith("deleted:")
                    and (_email(*sa.groups()) not in self.accounts or not known)
                ):
                    raise FakeError(
                        grpc.StatusCode.INVALID_ARGUMENT, f"Service account {_email(*sa.groups())} does not exist."
                    )
            key = (binding.role, binding.condition.SerializeToString() if binding.HasField("condition") else b"")
            members = roles.setdefault(key, [])
            members += [x for x in binding.members if x not in members]
        self.policies[project] = (self.policies.get(project, (1, {}))[0] + 1, roles)
        return self._policy(project)
