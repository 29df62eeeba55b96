"""Provisioning: the executor that walks a deployment's plan, and the drivers that do
each node's remote work.

:mod:`rl_lustre.provision.executor` runs the graph (concurrency, cancellation,
rollback, records); :mod:`rl_lustre.provision.drivers` maps each plan key to the
Google Cloud adapters (and the Kubernetes layer); :mod:`rl_lustre.provision.progress`
reports progress. Backends use them; ``import rl_lustre`` loads none of this.
"""
