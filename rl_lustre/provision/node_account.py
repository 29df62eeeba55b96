"""The driver of ``node-sa``: the service account a deployment's nodes run as, and its roles
on the project (see :func:`rl_lustre.plan.nodepools.node_account`)."""

from __future__ import annotations

from typing import Literal

from .context import Context, ensure_or_adopt, gone
from .step import Done, Step

__all__ = ["NodeAccountDriver"]


class NodeAccountDriver:
    """Create (or adopt, when its description carries our labels) the account, then grant its
    roles; delete: take the roles back (only from our member), then delete the account.

    An account of that name without our labels is refused, never adopted or deleted, and
    its roles are left alone.
    """

    deleted_with: str | None = None
    interruptible = False

    def __init__(self, ctx: Context) -> None:
        from ..gcp.iam import account_path
        from ..plankeys import NODE_SA_KEY

        self.ctx = ctx
        node = ctx.plan.get(NODE_SA_KEY)
        self.settings = node.settings
        self.path = account_path(ctx.project, node.name)
        self.member = f"serviceAccount:{node.name}"
        self.roles = list(node.settings["project_roles"])

    def ensure(self, step: Step) -> Done:
        accounts = self.ctx.apis.accounts
        found = accounts.get_or_none(self.path)
        done = ensure_or_adopt(
            step,
            found is not None,
            lambda: accounts.create(
                self.ctx.project,
                self.settings["account_id"],
                display_name=self.settings["display_name"],
                text=f"GKE nodes of rl_lustre deployment {self.ctx.deployment}",
                deployment=self.ctx.deployment,
            ),
        )
        self.ctx.apis.project_iam.add(self.ctx.project, self.member, self.roles)
        return done

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        from ..gcp._ownership import check_owned, labels_from_description

        accounts = self.ctx.apis.accounts
        found = accounts.get_or_none(self.path)
        if found is not None:
            # Someone else's account of that name: neither it nor its roles are ours to touch.
            check_owned(accounts.kind, self.path, labels_from_description(found.description), self.ctx.deployment)
        self.ctx.apis.project_iam.remove(self.ctx.project, self.member, self.roles)
        return gone(accounts.delete(self.path, deployment=self.ctx.deployment))
