"""One worker node of a local Ray head, on loopback only (run as a script, in its own process group).

``ray start --address=... --block`` cannot do this: with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
(the setting that keeps the head on 127.0.0.1) the CLI refuses to start a worker node, and
without it the CLI rewrites ``127.0.0.1`` — both the head's address and the node's own — to
the machine's outside address, where nothing listens and where the node's raylet would then
listen on every interface. So this script starts the node the way Ray's own single-machine
multi-node helper does (``ray.cluster_utils.Cluster.add_node``: a ``ray._private.node.Node``
with ``head=False``), with node address ``127.0.0.1``, which makes the raylet and its agents
bind loopback only. Then it blocks like ``ray start --block``: it prints the same start-up
line, stops every process of the node on SIGTERM, and exits if one of them dies.

Usage (by :func:`rl_lustre.ray.workers.start_local_worker`)::

    python _worker_node.py '<json: gcs_address, ports, num_cpus, num_gpus, memory, object_store_memory>'
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

STARTED = "Ray runtime started."


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    # Loopback mode (the head's setting): Ray resolves "this node" to 127.0.0.1.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray._private.node
    import ray._private.parameter

    params = ray._private.parameter.RayParams(
        gcs_address=spec["gcs_address"],
        node_ip_address="127.0.0.1",
        node_name=spec.get("node_name"),
        node_manager_port=spec["node_manager_port"],
        object_manager_port=spec["object_manager_port"],
        dashboard_agent_listen_port=spec["dashboard_agent_listen_port"],
        metrics_agent_port=spec["metrics_agent_port"],
        runtime_env_agent_port=spec["runtime_env_agent_port"],
        metrics_export_port=spec["metrics_export_port"],
        min_worker_port=spec["min_worker_port"],
        max_worker_port=spec["max_worker_port"],
        num_cpus=spec["num_cpus"],
        num_gpus=spec["num_gpus"],
        memory=spec.get("memory"),
        object_store_memory=spec["object_store_memory"],
        # One log monitor per machine is enough (the head's). Ray annotates it as a string
        # but reads it as a flag (ray.cluster_utils passes False too).
        include_log_monitor=False,  # type: ignore[arg-type]
    )
    node = ray._private.node.Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)

    def stop(signum: int, frame: object) -> None:
        node.kill_all_processes(check_alive=False, allow_graceful=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"{STARTED} node {node.node_id} at {node.node_ip_address}, raylet {node.node_manager_port}", flush=True)
    while True:
        time.sleep(1)
        dead = node.dead_processes()
        if dead:
            names = ", ".join(f"{kind} (exit {proc.returncode})" for kind, proc in dead)
            print(f"a process of this node exited: {names}; stopping the node", flush=True)
            node.kill_all_processes(check_alive=False, allow_graceful=False)
            return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
