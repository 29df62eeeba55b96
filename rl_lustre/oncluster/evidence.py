"""Collecting a stalled run's evidence into its bundle, and making sure the stalled attempt is gone.

``python -m rl_lustre_oncluster.evidence collect REQUEST.json`` writes a bundle
(:mod:`.diagnostics`): the supervisor runs it on the head when the watchdog finds a stall,
before it stops anything, and reads the bundle's ``bundle.json`` back. It is a process of its
own because it connects to Ray (the supervisor never does) and may take a while; the
supervisor bounds it. In order:

1. Ray's view, from the dashboard's state API: nodes, the run's actors and placement groups,
   ``ray status`` (the dashboard's ``/api/cluster_status``);
2. the run's processes: on the head, the attempt's session (the command, NeMo-RL's driver and
   what they started); on every node, the run's Ray workers (its actors, by the Ray job of the
   attempt's driver) and every process below them (:func:`.probe.node_report`, as a Ray task
   on the node), which also writes to the NCCL flight recorder's pipes there (:mod:`.nccl`);
3. a Python stack of each: through Ray's dashboard agent on the process's node
   (``/worker/traceback``, py-spy), and where that fails (a process stopped with SIGSTOP) with
   ``py-spy dump --nonblocking`` on the node;
4. the last lines of every log: the attempt's output (the supervisor wrote it), each actor's
   stdout and stderr and each node's raylet (the dashboard's ``/api/v0/logs/file``);
5. the Kubernetes events of the RayCluster's pods (on GKE; :mod:`.kubeevents`);
6. the flight recorder's dumps (:func:`.nccl.take_dumps`);
7. ``summary.txt`` (who is where: :func:`.stacks.summarize`) and ``bundle.json``.

A part that fails is named in the bundle with its error; the others go on.

``... stop REQUEST.json`` runs after the supervisor killed the attempt's command: it waits
until Ray shows none of the attempt's actors alive and none of its placement groups holding
resources, and ends the stragglers itself (SIGKILL on their node, the groups removed).

Standard library at module level; Ray only inside the functions that need it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.error
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import diagnostics as d
from .nccl import take_dumps, trigger
from .probe import descendants, describe_processes, on_nodes, proc_table, spy_dump
from .procs import session_of
from .raystate import StateApi, attempt_nodes
from .stacks import Place, parse_dump, summarize, where

__all__ = ["collect", "main", "stop"]

_LOG_LINES = 100
_THREADS = 16
_PROBE_TIMEOUT = 45.0
# How long the ranks get to dump once their pipes were written to.
_DUMP_WAIT = 3.0
_HOLDING = ("CREATED", "RESCHEDULING", "PENDING")


def _python(process: dict[str, Any]) -> bool:
    """Whether a process runs Python (py-spy reads only those): a Ray worker, or a python binary."""
    name = str(process.get("name") or "")
    first = os.path.basename(str(process.get("cmdline") or "").split(" ", 1)[0])
    return name.startswith(("ray::", "python", "ray_", "VLLM", "vllm")) or first.startswith("python")


class _Bundle:
    def __init__(self, path: str) -> None:
        self.path = path
        self.scrub = d.Scrubber()
        self.errors: dict[str, str] = {}

    def text(self, relative: str, text: str) -> None:
        d.write_text(self.path, relative, text, self.scrub)

    def json(self, relative: str, value: Any) -> None:
        d.write_json(self.path, relative, value, self.scrub)

    def attempt(self, part: str, work: Callable[[], Any]) -> Any:
        """Run one part of the collection; a failure is recorded under ``part`` and None returned."""
        try:
            return work()
        except Exception as exc:  # any failure is evidence too
            self.errors[part] = f"{type(exc).__name__}: {str(exc)[:500]}"
            return None


def collect(request: dict[str, Any]) -> dict[str, Any]:
    """Write the bundle ``request["bundle"]`` describes (see the module); returns its ``bundle.json``."""
    started = time.time()
    bundle = _Bundle(request["bundle"])
    os.makedirs(bundle.path, exist_ok=True)
    api = StateApi.for_job(request.get("dashboard"))
    nodes: list[dict[str, Any]] = bundle.attempt("ray-nodes", lambda: api.list("nodes")) or []
    head: dict[str, Any] = next((n for n in nodes if n.get("is_head_node")), {})
    names = {str(n.get("node_id")): str(n.get("node_name") or n.get("node_ip") or "") for n in nodes}
    ips = {str(n.get("node_id")): str(n.get("node_ip") or "") for n in nodes}
    head_id = str(head.get("node_id") or "")
    session = int(request["session"])
    found = bundle.attempt(
        "ray-job",
        lambda: attempt_nodes(
            api, str(request.get("submission_id") or ""), session, lambda pid, sid: session_of(pid) == sid
        ),
    )
    job_id = found[0] if found else None
    actors = [
        a
        for a in (bundle.attempt("ray-actors", lambda: api.list("actors")) or [])
        if job_id and a.get("job_id") == job_id and a.get("state") == "ALIVE"
    ]
    groups = [
        g
        for g in (bundle.attempt("ray-placement-groups", lambda: api.list("placement_groups")) or [])
        if job_id and g.get("creator_job_id") == job_id
    ]
    bundle.json(f"{d.RAY}/nodes.json", nodes)
    bundle.json(f"{d.RAY}/actors.json", actors)
    bundle.json(f"{d.RAY}/placement_groups.json", groups)
    status = bundle.attempt("ray-status", lambda: _ray_status(api))
    bundle.text(f"{d.RAY}/status.txt", status or f"(not read: {bundle.errors.get('ray-status')})\n")

    # The processes: the attempt's session on the head, the run's workers (and below) everywhere.
    table = proc_table()
    head_pids = sorted(pid for pid in table if session_of(pid) == session)
    roots: dict[str, list[int]] = {}
    roles: dict[tuple[str, int], str] = {}
    for a in actors:
        node, pid = str(a.get("node_id") or ""), a.get("pid")
        if node and pid:
            roots.setdefault(node, []).append(int(pid))
            roles[(node, int(pid))] = str(a.get("repr_name") or a.get("class_name") or "actor")
    driver_pid = next((int(e["driver_info"]["pid"]) for e in _driver(api, job_id, bundle)), None)
    stem = (request.get("nccl") or {}).get("stem")
    processes: dict[str, list[dict[str, Any]]] = {head_id or "head": describe_processes(head_pids, table)}
    pipes: list[str] = []
    if stem:  # the pipes of the head's own ranks, if any
        pipes += bundle.attempt("nccl-trigger-head", lambda: trigger(stem)) or []
    others = {node: {"roots": pids, "pipe_stem": stem} for node, pids in roots.items() if node != head_id}
    if head_id in roots:
        extra = [p for p in descendants(roots[head_id], table) if p not in head_pids]
        processes[head_id] += describe_processes(extra, table)
    reports: dict[str, dict[str, Any]] = {}
    if others:
        reports = bundle.attempt("ray-probe", lambda: _probe(others)) or {}
    for node, report in reports.items():
        if "error" in report:
            bundle.errors[f"node {names.get(node, node)}"] = report["error"]
            processes[node] = [{"pid": pid, "state": "", "name": roles.get((node, pid), "")} for pid in roots[node]]
        else:
            processes[node] = report.get("processes") or []
            pipes += report.get("pipes") or []
    bundle.json(d.PROCESSES, {names.get(n, n) or n: ps for n, ps in processes.items()})

    # Their stacks: Ray's dashboard agent first; py-spy without stopping where it cannot.
    wanted = [(node, p) for node, ps in processes.items() for p in ps if _python(p)]
    stacks: dict[tuple[str, int], tuple[bool, str]] = {}

    def by_agent(item: tuple[str, dict[str, Any]]) -> tuple[tuple[str, int], tuple[bool, str]]:
        node, p = item
        return (node, p["pid"]), _traceback(api, p["pid"], node, ips.get(node, ""))

    with ThreadPoolExecutor(_THREADS) as pool:
        stacks.update(pool.map(by_agent, wanted))
    failed: dict[str, list[int]] = {}
    for (node, pid), (ok, _text) in stacks.items():
        if not ok:
            failed.setdefault(node, []).append(pid)
    for pid in failed.pop(head_id or "head", []):
        ok, text = spy_dump(pid)
        stacks[(head_id or "head", pid)] = (ok, text if ok else f"{stacks[(head_id or 'head', pid)][1]}; {text}")
    if failed:
        again = bundle.attempt(
            "ray-probe-stacks", lambda: _probe({n: {"roots": [], "dump": pids} for n, pids in failed.items()})
        )
        for node, report in (again or {}).items():
            for pid, got in (report.get("stacks") or {}).items():
                key = (node, int(pid))
                ok, text = bool(got.get("ok")), str(got.get("text") or "")
                stacks[key] = (ok, text if ok else f"{stacks[key][1]}; {text}")

    places = []
    for node, ps in processes.items():
        node_name = names.get(node, node) or node
        label = f"{node_name} (the head)" if node == (head_id or "head") else node_name
        for p in ps:
            pid = int(p["pid"])
            own = node == (head_id or "head") and pid == driver_pid
            role = "driver" if own else roles.get((node, pid)) or p.get("name") or "?"
            got = stacks.get((node, pid))
            if got is None:
                continue
            ok, text = got
            if ok:
                bundle.text(f"{d.STACKS}/{node_name}/{pid}-{role}.txt", text)
            places.append(
                Place(
                    role=str(role),
                    pid=pid,
                    node=label,
                    at=where(parse_dump(text)) if ok else None,
                    state=str(p.get("state") or ""),
                    error="" if ok else text[:300],
                )
            )

    # The last lines of every log.
    bundle.attempt("logs", lambda: _logs(api, bundle, actors, nodes, names))
    kube = request.get("kube")
    if kube:
        from .kubeevents import in_cluster, pod_events

        if in_cluster():
            events = bundle.attempt("kubernetes-events", lambda: pod_events(kube["cluster"], kube.get("namespace")))
            bundle.json(f"{d.KUBERNETES}/events.json", events if events is not None else {})
        else:
            bundle.errors["kubernetes-events"] = "not in a Kubernetes pod: no in-cluster credentials"
    prefix = (request.get("nccl") or {}).get("prefix")
    dumps: list[str] = []
    if prefix:
        if pipes:  # the ranks told to dump get a moment to write
            time.sleep(max(0.0, started + _DUMP_WAIT - time.time()))
        dumps = take_dumps(prefix, float(request.get("since") or 0), os.path.join(bundle.path, d.NCCL))

    step = int(request.get("step") or 0)
    lines = summarize(places, step=step)
    record = {
        **(request.get("stall") or {}),
        "attempt": request.get("attempt"),
        "step": step,
        "job_id": job_id,
        "summary": lines,
        "processes": [p.__dict__ for p in places],
        "nccl_pipes": pipes,
        "nccl_dumps": [os.path.basename(p) for p in dumps],
        "errors": bundle.errors,
        "collected_in": round(time.time() - started, 3),
    }
    headline = str(request.get("headline") or "")
    text = "\n".join([headline, "", "Where the run's processes are:", *(f"  {line}" for line in lines)])
    if bundle.errors:
        text += "\n\nNot collected:\n" + "\n".join(f"  {k}: {v}" for k, v in sorted(bundle.errors.items()))
    bundle.text(d.SUMMARY, text.strip() + "\n")
    bundle.json(d.BUNDLE_JSON, record)
    return record


def _probe(requests: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`.probe.node_report` on each node, through a Ray connection of this process's own,
    within :data:`_PROBE_TIMEOUT` (and as long again to connect)."""
    result: list[dict[str, dict[str, Any]]] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            _connect()
            result.append(on_nodes(requests, timeout=_PROBE_TIMEOUT))
        except BaseException as exc:  # reported to the caller
            failure.append(exc)

    thread = threading.Thread(target=work, name="rl_lustre-probe", daemon=True)
    thread.start()
    thread.join(2 * _PROBE_TIMEOUT)
    if failure:
        raise failure[0]
    if not result:
        raise TimeoutError(f"Ray did not run the probes within {2 * _PROBE_TIMEOUT:g}s")
    return result[0]


def _connect() -> None:
    """Connect this process to the cluster, as a Ray job of its own, with this package shipped
    to the nodes (their tasks import :mod:`.probe`)."""
    import logging

    import ray

    if not ray.is_initialized():
        here = os.path.dirname(os.path.abspath(__file__))
        ray.init(
            address=os.environ.get("RAY_ADDRESS") or "auto",
            namespace="rl_lustre_diagnostics",
            runtime_env={"py_modules": [here]},
            logging_level=logging.WARNING,
            log_to_driver=False,
        )


def _driver(api: StateApi, job_id: str | None, bundle: _Bundle) -> list[dict[str, Any]]:
    if not job_id:
        return []
    jobs = bundle.attempt("ray-jobs", lambda: api.list("jobs")) or []
    return [j for j in jobs if j.get("job_id") == job_id and (j.get("driver_info") or {}).get("pid")]


def _ray_status(api: StateApi) -> str:
    body = json.loads(api.text("/api/cluster_status", format="1"))
    data = body.get("data") or {}
    status = data.get("clusterStatus") or data.get("cluster_status")
    return str(status) + "\n" if status else "Ray did not report a cluster status\n"


def _traceback(api: StateApi, pid: int, node_id: str, ip: str) -> tuple[bool, str]:
    """A process's stack through Ray's dashboard agent on its node (py-spy, as the dashboard's
    "Stack Trace" takes it). Ray 2.46 finds the node by ``ip``; later Rays prefer ``node_id``."""
    try:
        return True, api.text("/worker/traceback", timeout=30.0, pid=str(pid), ip=ip, node_id=node_id, native="0")
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace").strip().splitlines()
        return False, f"Ray's dashboard agent: HTTP {exc.code}: {body[0][:300] if body else exc.reason}"
    except OSError as exc:
        return False, f"Ray's dashboard agent: {exc}"


def _logs(
    api: StateApi, bundle: _Bundle, actors: list[dict[str, Any]], nodes: list[dict[str, Any]], names: dict[str, str]
) -> None:
    jobs = []
    for a in actors:
        node = names.get(str(a.get("node_id")), str(a.get("node_id")))
        label = f"{a.get('class_name') or 'actor'}-{a.get('pid')}"
        for suffix in ("out", "err"):
            jobs.append((f"{d.LOGS}/{node}/{label}.{suffix}", {"actor_id": str(a.get("actor_id")), "suffix": suffix}))
    for n in nodes:
        if n.get("state") == "ALIVE":
            node = names.get(str(n.get("node_id")), str(n.get("node_id")))
            jobs.append((f"{d.LOGS}/{node}/raylet.out", {"node_id": str(n.get("node_id")), "filename": "raylet.out"}))

    def tail(item: tuple[str, dict[str, str]]) -> None:
        relative, params = item
        try:
            text = api.text("/api/v0/logs/file", timeout=20.0, lines=str(_LOG_LINES), **params)
        except (OSError, ValueError) as exc:
            text = f"(not read: {exc})\n"
        bundle.text(relative, text)

    with ThreadPoolExecutor(_THREADS) as pool:
        list(pool.map(tail, jobs))


def stop(request: dict[str, Any]) -> dict[str, Any]:
    """After the attempt's command was killed: wait up to ``request["grace"]`` seconds for Ray
    to end the attempt's actors and release its placement groups; end those left (SIGKILL on
    their node, the groups removed). Returns what was left and what was done."""
    api = StateApi.for_job(request.get("dashboard"))
    job_id = request.get("job_id")
    if not job_id:
        return {"actors": [], "groups": [], "forced": False}
    deadline = time.monotonic() + float(request.get("grace") or 20.0)
    while True:
        actors = [a for a in api.list("actors") if a.get("job_id") == job_id and a.get("state") == "ALIVE"]
        groups = [
            g for g in api.list("placement_groups") if g.get("creator_job_id") == job_id and g.get("state") in _HOLDING
        ]
        if not actors and not groups:
            return {"actors": [], "groups": [], "forced": False}
        if time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    kill: dict[str, list[int]] = {}
    for a in actors:
        if a.get("node_id") and a.get("pid"):
            kill.setdefault(str(a["node_id"]), []).append(int(a["pid"]))
    done = _probe({node: {"roots": [], "kill": pids} for node, pids in kill.items()}) if kill else {}
    removed = _remove_groups([str(g.get("placement_group_id")) for g in groups])
    return {
        "actors": [a.get("actor_id") for a in actors],
        "groups": [g.get("placement_group_id") for g in groups],
        "killed": {node: r.get("killed", []) for node, r in done.items()},
        "removed": removed,
        "forced": True,
    }


def _remove_groups(ids: list[str]) -> list[str]:
    if not ids:
        return []
    import ray
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    _connect()
    removed = []
    for group_id in ids:
        try:
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group_id))))
            removed.append(group_id)
        except Exception:  # already gone, or not ours to remove
            continue
    return removed


def main(argv: list[str] | None = None) -> int:
    """``collect|stop REQUEST.json``: prints the result as one JSON line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("collect", "stop"):
        print(f"usage: python -m {__package__}.evidence collect|stop REQUEST.json", file=sys.stderr)
        return 2
    with open(args[1]) as f:
        request = json.load(f)
    result = collect(request) if args[0] == "collect" else stop(request)
    print(json.dumps({"result": result}, default=str), flush=True)
    return 0


def command(verb: str, request_path: str) -> tuple[list[str], dict[str, str]]:
    """The command line that runs ``verb`` on a request file, in this interpreter and package,
    and its environment: this one, with the package importable (shipped as a top-level
    package, it is found where this process found it)."""
    env = dict(os.environ)
    # Its Ray connection is a job of its own, not another driver of the run's submission.
    env.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
    if __package__ and "." not in __package__:
        parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (parent, env.get("PYTHONPATH")) if p)
    return [sys.executable, "-m", f"{__package__}.evidence", verb, request_path], env


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Not waiting for Ray's threads (or a probe left running): the result is out.
    os._exit(code)
