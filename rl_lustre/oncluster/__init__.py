"""The code that runs on the cluster: one package, shipped whole with every job.

A job rl_lustre submits does not run NeMo-RL's command directly: it runs this package's
supervisor on the Ray head, which waits in the cluster's queue, runs NeMo-RL, watches it
and reruns it after a loss. Everything that runs there, or in the job image beside
NeMo-RL, lives here:

- :mod:`.supervisor` (``python -m rl_lustre_oncluster.supervisor``) and what it is told
  (:mod:`.jobargs`), how it watches Ray's nodes (:mod:`.watch`, :mod:`.raystate`), the
  processes of an attempt (:mod:`.procs`), capacity that ends (:mod:`.lifetimes`, and the
  ends GKE puts on Nodes, read through the Kubernetes API: :mod:`.nodeends`, :mod:`.incluster`), an
  on-demand fallback said (:mod:`.fallback`) and the time stamps of NeMo-RL's lines
  (:mod:`.stamps`);
- the cluster's queue (:mod:`.queue`);
- the records a run leaves, which the client reads back (:mod:`.records`), and the
  NeMo-RL formats both sides read (:mod:`.nemo_formats`);
- a run's directory on the volume, where its records live (:mod:`.rundir`);
- the model prefetch program of the prefetch Job (:mod:`.prefetch`).

The rules, because the cluster's image (``nvcr.io/nvidia/nemo-rl:v0.4.0``) has Python
3.12, Ray 2.46.0 and no rl_lustre:

- the standard library only at module level, and modules of this package imported
  relatively (it runs as ``rl_lustre_oncluster`` there); Ray only inside the functions
  that need it, and only its 2.46 API;
- nothing here imports the rest of rl_lustre; the client imports from here (the record
  formats above all), never the other way round.

The client ships it with :func:`rl_lustre.recovery.shipped_package` (the whole directory,
as the job's ``py_modules``); ``tests/test_oncluster_package.py`` imports every module of it
in an interpreter with no site-packages, and ``nox -s tests-oncluster`` runs its tests with
the image's Ray and Python.
"""
