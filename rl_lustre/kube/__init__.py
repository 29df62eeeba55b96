"""Kubernetes side of a GKE deployment.

:mod:`rl_lustre.kube.manifests` builds the objects a deployment applies, as plain dicts,
one module per object: :mod:`~rl_lustre.kube.persistent_volume` (the Lustre
PersistentVolume and its claim), :mod:`~rl_lustre.kube.secret`,
:mod:`~rl_lustre.kube.raycluster`, :mod:`~rl_lustre.kube.fabric` (RDMA networks);
:mod:`~rl_lustre.kube.prepull` the image pre-pull DaemonSet, :mod:`~rl_lustre.kube.prefetch`
the model prefetch Job (and :mod:`~rl_lustre.oncluster.prefetch` the program it runs).
:mod:`~rl_lustre.kube.apply` applies, waits for and deletes them through
:mod:`~rl_lustre.kube.client`.

This package is imported lazily by :class:`rl_lustre.Cluster`; keep this module free of
imports so that ``import rl_lustre.kube`` never pulls in the Kubernetes client.
"""
