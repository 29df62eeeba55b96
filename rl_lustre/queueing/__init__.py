"""The cluster's queue as the client reads it (:mod:`.state`): a job's place, state and
timeline, from its log. The queue itself runs on the cluster, beside each job's
supervisor: see :mod:`rl_lustre.oncluster.queue` for how it decides and what it records.
"""
