"""The goodput ledger of a preempted run, end to end: real worker raylets taken away mid-run,
locally and on the GKE fakes (with a second job queued behind it), checked against the supervisor's
record, NeMo-RL's own step times (printed by the rehearsal) and, on the fakes, the node-seconds the Kubernetes objects
themselves say were billed."""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.preemption_job import JOB_ARGS, STEP_SECONDS, two_worker_cluster, wait_done
from helpers.spot_gke import SpotHead, nemo_rl_dir, spot_gke, spot_spec

from rl_lustre import Cluster, GRPOJob
from rl_lustre.goodput import CATEGORIES, GoodputLedger
from rl_lustre.nemo_rl.logs import StepRecord, parse_log
from rl_lustre.oncluster.records import read_journal
from rl_lustre.testing import preempt

pytestmark = pytest.mark.slow

JOB = GRPOJob(**{**JOB_ARGS, "name": "ledger-preempt", "overrides": {"grpo.val_period": 5}})


@pytest.fixture(scope="module")
def workers_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two real worker nodes of one GPU each."""
    volume = tmp_path_factory.mktemp("ledger-volume")
    with two_worker_cluster("rll-ledger", volume, step_seconds=STEP_SECONDS) as cluster:
        yield cluster


def attempts(log: str) -> list[dict[int, StepRecord]]:
    """NeMo-RL's own records of each attempt's steps (as printed), by step."""
    parts = log.split("Loaded configuration from:")[1:]
    return [{s.global_step: s for s in parse_log(part).steps} for part in parts]


def surviving(log: str, resume: int) -> list[StepRecord]:
    """The steps whose work was kept: the first attempt's up to the checkpoint resumed from, then the rerun's."""
    first, second = attempts(log)
    return [s for k, s in first.items() if k <= resume] + list(second.values())


def check_lost_and_training(ledger: GoodputLedger, run: Any, gone: Any, nodes: int) -> None:
    """What the issue asks of a preempted run's ledger, on ``nodes`` nodes."""
    [restart] = run.restarts()
    [d] = ledger.restarts
    assert d.resume_step == restart.resumed_from_step == 4
    assert d.steps_redone == restart.steps_redone
    assert restart.seconds_lost is not None
    assert d.recovery_wall == pytest.approx(restart.seconds_lost, abs=0.01)  # the same supervisor records
    log = run.logs()
    first, second = attempts(log)
    t5 = first[5].seconds
    assert t5 is not None
    # Lost covers the redone steps and the wait: every node ran step 5 for nothing (NeMo-RL's own
    # time of it), and the survivors waited the whole recovery (the supervisor's record of it).
    lower = nodes * t5 + (nodes - 1) * restart.seconds_lost
    t6 = max((a[6].seconds or 0) for a in (first, second) if 6 in a)
    assert restart.first_step_at is not None
    upper = (
        lower
        + nodes * (t6 + (restart.lost_at - gone.at) + 1.0)
        + (restart.first_step_at - gone.at - (gone.back_after or 0))
    )
    assert lower <= ledger.seconds["lost"] <= upper, (lower, ledger.seconds["lost"], upper, str(ledger))
    # Training: the steps completed times their step time, within 10 %.
    kept = surviving(log, 4)
    assert [s.global_step for s in kept] == list(range(1, 11))
    work = nodes * math.fsum(
        (s.seconds or 0) - s.timings.get("checkpointing", 0) - (s.validation_seconds or 0) for s in kept
    )
    assert abs(ledger.seconds["training"] - work) <= 0.10 * work, (ledger.seconds["training"], work)
    # ... and the steps completed times the step time: the median step's training, NeMo-RL's
    # step time less its save and validation (the ledger's checkpoint and validation; every
    # second step saves, so the median of whole step times would count half a save as training).
    median = statistics.median(
        (s.seconds or 0) - s.timings.get("checkpointing", 0) - (s.validation_seconds or 0) for s in kept
    )
    assert abs(ledger.seconds["training"] - nodes * 10 * median) <= 0.10 * nodes * 10 * median, (
        ledger.seconds["training"],
        nodes * 10 * median,
    )
    assert ledger.attributed_fraction >= 0.95, str(ledger)
    validation = nodes * math.fsum(s.validation_seconds or 0 for s in kept)
    assert ledger.seconds["validation"] == pytest.approx(validation, rel=0.10, abs=0.05 * nodes)
    saves = nodes * math.fsum(s.timings.get("checkpointing", 0) for s in kept)
    assert ledger.seconds["checkpoint"] == pytest.approx(saves, rel=0.10, abs=0.05 * nodes)
    # Exactly once: the categories are the total, and no two pieces of a node overlap.
    assert math.fsum(ledger.seconds.values()) == pytest.approx(ledger.total_seconds)
    for node in {s.node for s in ledger.segments}:
        mine = sorted((s for s in ledger.segments if s.node == node), key=lambda s: s.start)
        assert all(a.end <= b.start for a, b in itertools.pairwise(mine))


def test_a_local_preempted_runs_ledger_covers_the_redone_steps_and_the_wait(
    workers_cluster: Cluster, preemption_report: list[str]
) -> None:
    cluster = workers_cluster
    job = attrs.evolve(JOB, name=f"ledger-{time.time_ns() % 10**6}")
    run = cluster.submit(job)
    wait_done(job, cluster, 5)
    gone = preempt(cluster, nodes=1, back_after=1.0)
    assert run.wait(timeout=300) == "SUCCEEDED"
    ledger = run.goodput()

    check_lost_and_training(ledger, run, gone, nodes=2)
    # Three nodes: the two it started on and the replacement; the lost one billed until its kill.
    assert len(ledger.nodes) == 3
    [lost] = [s for s in ledger.segments if s.node == gone.nodes[0]][-1:]
    assert gone.at <= lost.end <= gone.at + 1.0
    assert ledger.total_usd == 0
    assert "a local deployment has no cloud cost" in ledger.notes
    d = ledger.restarts[0]
    preemption_report.append(
        f"local ledger, 2 nodes: lost {ledger.seconds['lost']:.1f} node-s (redone {d.redone_node_seconds:.1f}, "
        f"recovery {d.recovery_node_seconds:.1f}), attributed {ledger.attributed_fraction:.1%}; {_categories(ledger)}"
    )


def _categories(ledger: GoodputLedger) -> str:
    """The ledger's non-zero categories, in node-seconds (for the session's report)."""
    return ", ".join(f"{c} {ledger.seconds[c]:.1f}" for c in CATEGORIES if ledger.seconds[c])


def billed_by_the_fake(kube: Any, since: float, now: float) -> tuple[float, int]:
    """Node-seconds of the GPU nodes inside ``[since, now)``, from the fake's Nodes and Events alone."""
    from rl_lustre.kube.readiness import seconds

    spans: dict[str, list[float | None]] = {}
    for n in kube.objects("Node"):
        if n["metadata"]["labels"].get("cloud.google.com/gke-accelerator"):
            spans[n["metadata"]["uid"]] = [seconds(n["metadata"]["creationTimestamp"]), None]
    for e in kube.objects("Event", include_events=True):
        obj = e["involvedObject"]
        if obj["kind"] == "Node" and "gpu" in obj["name"]:
            span = spans.setdefault(obj["uid"], [None, None])
            if e["reason"] == "RegisteredNode" and span[0] is None:
                span[0] = seconds(e["firstTimestamp"])
            elif e["reason"] == "RemovingNode":
                span[1] = seconds(e["firstTimestamp"])
    total = 0.0
    for start, end in spans.values():
        assert start is not None
        total += max(0.0, min(end if end is not None else now, now) - max(start, since))
    return total, len(spans)


def test_on_the_gke_fakes_a_preempted_runs_ledger_in_spot_dollars_a_queued_jobs_and_the_clusters(
    spot_head: SpotHead, tmp_path: Path, preemption_report: list[str]
) -> None:
    from rl_lustre.catalog import PRICES

    spec = spot_spec("rl-ledger", tmp_path, num_nodes=2)
    base = {
        **JOB_ARGS,
        "num_generations_per_prompt": 16,
        "train_global_batch_size": 64,
        "nemo_rl_dir": str(nemo_rl_dir(tmp_path, STEP_SECONDS)),
        "overrides": {"grpo.val_period": 5},
    }
    job_a = GRPOJob(**{**base, "name": "ledger-a"})
    job_b = GRPOJob(**{**base, "name": "ledger-b", "max_num_steps": 4})

    # Everything is read and checked while the cluster is up: the runs' logs and records come
    # through its API server.
    with spot_gke(spot_head, spec) as (cluster, kube):
        # The cluster is up and idle a moment before the first run.
        time.sleep(2.0)
        before = time.time() - 1.0
        run = cluster.submit(job_a)
        wait_done(job_a, cluster, 2)
        # B takes the whole cluster too: it waits in the queue behind A, through A's recovery.
        second = cluster.submit(job_b)
        wait_done(job_a, cluster, 5)
        gone = preempt(cluster, nodes=1, back_after=1.0)
        assert run.wait(timeout=300) == "SUCCEEDED"
        gone.wait(timeout=120)
        ledger = run.goodput()
        assert second.wait(timeout=300) == "SUCCEEDED"
        queued = second.goodput()
        journal_b = read_journal(second.logs(records=True))
        a_end = run.info().end_time
        whole = cluster.goodput(since=before)
        billed, count = billed_by_the_fake(kube, before, time.time())
        labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.objects("Node")}
        check_lost_and_training(ledger, run, gone, nodes=2)
        # Three Spot nodes (the second of them the same VM name again), each at the A4 Spot list price.
        assert len(ledger.nodes) == 3
        assert {n.kind for n in ledger.nodes} == {"spot"}
        assert all(
            labels[n.node.split("#")[0]]["cloud.google.com/gke-spot"] == "true"
            for n in ledger.nodes
            if n.node.split("#")[0] in labels
        )
        spot = PRICES.machines["a4-highgpu-8g"].spot
        for c in CATEGORIES:
            assert ledger.usd[c] == pytest.approx(ledger.seconds[c] * spot / 3600)
        assert ledger.prices_as_of == PRICES.as_of
        # The cluster's ledger: the two runs and its own time, and all of what the Kubernetes objects say was billed.
        assert {r.name for r in whole.runs} == {run.job_id, second.job_id}
        for c in CATEGORIES:
            assert whole.seconds[c] == pytest.approx(
                sum(r.seconds[c] for r in whole.runs) + whole.own.seconds[c], abs=1e-6
            )
        assert whole.run(run.job_id).seconds["lost"] == pytest.approx(ledger.seconds["lost"], rel=0.02)
        assert abs(whole.total_seconds - billed) <= 1.0 * count + 1.0, (whole.total_seconds, billed, count)
        assert whole.own.seconds["idle"] > 0
        assert whole.attributed_fraction >= 0.95, str(whole)
        # No node-second is in two runs' ledgers.
        for node in {s.node for s in whole.segments}:
            owned = sorted((s for s in whole.segments if s.node == node and s.owner is not None), key=lambda s: s.start)
            assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(owned)), node

        # The queued second job: its supervisor's records say it waited behind A until A ended.
        assert a_end is not None
        [q] = [r for r in journal_b if r["event"] == "queued"]
        granted = [r["at"] for r in journal_b if r["event"] == "granted"]
        assert run.job_id in q["behind"]
        assert q["at"] < a_end, (q, a_end)
        assert granted
        assert granted[0] >= q["at"]
        # While A held the nodes they were A's: B's ledger starts when A ended, and its wait from
        # then to its grant is idle (the cluster had the nodes B needs).
        assert queued.segments
        assert min(s.start for s in queued.segments) >= a_end - 1e-6
        wait = 2 * max(0.0, granted[0] - a_end)
        waited = [s for s in queued.segments if s.tag == "queued"]
        assert {s.category for s in waited} <= {"idle"}
        assert math.fsum(s.seconds for s in waited) == pytest.approx(wait, abs=0.05), (waited, wait, str(queued))
        assert queued.seconds["lost"] == 0
        assert queued.seconds["training"] > 0
        assert queued.attributed_fraction >= 0.95, str(queued)
        assert whole.run(second.job_id).seconds == pytest.approx(queued.seconds)
        d = ledger.restarts[0]
        preemption_report.append(
            f"fake GKE ledger, 2 Spot nodes: lost {ledger.seconds['lost']:.1f} node-s (${ledger.usd['lost']:.3f}), "
            f"redone {d.redone_node_seconds:.1f}, recovery {d.recovery_node_seconds:.1f}, "
            f"attributed {ledger.attributed_fraction:.1%}; cluster {whole.total_seconds:.0f} node-s, attributed "
            f"{whole.attributed_fraction:.1%}; run A {_categories(ledger)}; queued B {_categories(queued)}"
        )
