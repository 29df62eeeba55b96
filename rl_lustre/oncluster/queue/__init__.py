"""The cluster's queue: jobs wait their turn on the Ray head instead of failing.

NeMo-RL reserves its GPUs through Ray placement groups and fails when they are taken
(six retries when the cluster is short of GPUs in total, a 180 s timeout when other
jobs hold them), and Ray's Jobs API starts every submission at once. So every job
rl_lustre submits (``cluster.submit`` and ``run_sweep`` alike) runs its supervisor
(:mod:`rl_lustre.oncluster.supervisor`) first, on the head, and the supervisor starts
NeMo-RL only when the queue admits the job. Here, on the cluster:

- :mod:`.claims`: the ledger, a claim file per job on the head's disk, alive exactly as
  long as its supervisor (``flock``);
- :mod:`.policy`: who starts next (best-effort FIFO over whole nodes, priority, a
  backfill window; a recovering job ahead of every queued one);
- :mod:`rl_lustre.oncluster.raystate`: Ray's live view (nodes, placement groups) over
  the state API;
- :mod:`.member`: one job's side: join, wait, hold, recover, release;

and on the client's side :mod:`rl_lustre.queueing.state`: a job's queue state and
timeline, read back from its log.

The queue runs on the cluster (standard library only, part of the on-cluster package).
Nothing is kept in the submitting process: the laptop may sleep or exit, a second
process's jobs join the same queue, and any process that attaches reads the state from
the job's log.

Records
-------

Each step is a journal line in the job's log (:mod:`rl_lustre.oncluster.records`:
``RL_LUSTRE_EVENT {json}``; every record has ``v`` = 1, ``at`` = the head's time in
seconds since the epoch, ``event`` and ``job`` = the submission id):

``queued``
    the job joined the queue (``at`` is when). Fields: ``state`` (``queued``), ``need``
    (its nodes), ``gpus_per_node``, ``priority``, ``submitted_at`` (the submitting
    client's clock), ``place`` (1-based among the queued jobs), ``queued`` (how many),
    ``behind`` (the ids ahead of it: the holders, then the queued jobs before it),
    ``ahead`` (the same as ``[id, state, nodes]``), ``usable`` (nodes it could use now),
    ``capacity`` (the cluster's nodes), ``up`` (GPU nodes Ray shows up; null when not
    asked), ``waiting_for`` (in words; null when it can start at once).
``waiting``
    the same fields, written whenever the place, the usable nodes or the reason change
    (``state`` ``recovering`` while a recovery waits for its nodes).
``granted``
    the job may start (again): ``need``, ``slots`` (the queue's node numbers it holds,
    0 .. capacity-1, for timelines), ``attempt`` (1 for the first start), ``after``
    (``queued`` or ``recovering``), ``waited`` (seconds).
``held``
    the Ray nodes this attempt's placement groups hold, once known: ``attempt``,
    ``nodes`` (``[{node_id, address, name, reason, gpus}]``).
``released``
    the job gave its claim back: ``reason`` (``succeeded``, ``failed``, ``stopped``,
    ``gave-up``), ``held`` (whether it had been admitted).
``reaped``
    this supervisor found and removed the claim of ``job``, whose supervisor had died:
    ``state``, ``nodes``.

A recovery in between is told by the ``RL_LUSTRE_RESTART`` / ``RL_LUSTRE_RESUMED``
records (:mod:`rl_lustre.recovery`): the job keeps its claim from the loss to the next
``granted``. The time a job held nodes is from its first ``granted`` to its
``released``.
"""
