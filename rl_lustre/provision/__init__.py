"""Provisioning: the executor that walks a deployment's plan, and the drivers that do
each node's remote work.

:mod:`rl_lustre.provision.executor` runs the graph (concurrency, cancellation,
rollback, records); :mod:`rl_lustre.provision.drivers` maps each plan key to its driver:
the Google Cloud ones in :mod:`~rl_lustre.provision.gcp_drivers`, the Kubernetes ones in
:mod:`~rl_lustre.provision.kube_drivers`, the start-up ones (image pre-pull, model
prefetch) in :mod:`~rl_lustre.provision.startup`, all sharing a
:class:`~rl_lustre.provision.context.Context`; :mod:`rl_lustre.provision.progress`
reports progress. Backends use them; ``import rl_lustre`` loads none of this.
"""
