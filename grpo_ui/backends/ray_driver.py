"""The Ray job's driver for the per-node path: runs on the Ray cluster (the job's entrypoint, on node 0), not in the
app; it imports only the standard library and Ray, with the cluster's Python.

``python ray_driver.py PLAN`` reads the plan the Ray backend wrote (grpo_ui.backends.ray: each node's address,
script, log, process marker and GPUs) and runs each node's script on its own Ray node, one actor per node pinned by
node affinity and holding that node's GPUs as Ray resources — the same scripts the SSH and Slurm backends run. Each
script runs in a session of its own with the node's marker in its environment, its output in the node's log, and
writes its exit code into the run directory as it does elsewhere. The driver ends when every trainer has ended:
exit 0 when all succeeded, 1 at the first that failed or was lost. It says what happens in lines that start with
``grpo-ui:`` (the backend reads them from the driver's log through the Jobs API):

    grpo-ui: waiting for resources: node 1 (10.0.0.2) needs GPU 8 ...
    grpo-ui: node 1 started (pid 4242)
    grpo-ui: node 1 ended at 1790000000.000: exit code 1
    grpo-ui: node 1 lost at 1790000000.000: <what Ray said>
    grpo-ui: error: <why nothing could start>
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

STARTED_WITHIN = 5.0  # seconds before a node that has not started is reported as waiting for resources
JOIN_WAIT = 120.0     # seconds a node of the job may take to join the cluster


def say(line: str) -> None:
    print(f"grpo-ui: {line}", flush=True)


@ray.remote(num_cpus=0)
class NodeTask:
    """One node's script on its Ray node."""

    def start(self, script: str, log: str, run_dir: str, marker: str) -> int:
        os.makedirs(run_dir, exist_ok=True)
        name, _, value = marker.partition("=")
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(["bash", "--norc", script], cwd=run_dir, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, name: value})
        return self.proc.pid

    def wait(self) -> int:
        return self.proc.wait()


def node_ids(addresses: list[str]) -> dict[str, str]:
    """Each address → the id of the alive Ray node at it, waiting up to JOIN_WAIT for nodes still joining; exits
    (code 2) naming the addresses no node has."""
    ips = {a: socket.gethostbyname(a) for a in addresses}
    deadline = time.time() + JOIN_WAIT
    while True:
        alive = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
        missing = [a for a in addresses if ips[a] not in alive]
        if not missing:
            return {a: alive[ips[a]] for a in addresses}
        if time.time() > deadline:
            say(f"error: no Ray node at {', '.join(missing)}; the cluster's nodes: {', '.join(sorted(alive))}")
            sys.exit(2)
        time.sleep(1)


def main(plan_path: str) -> int:
    with open(plan_path) as f:
        plan = json.load(f)
    ray.init()
    nodes = plan["nodes"]
    ids = node_ids([n["address"] for n in nodes])
    totals = {n["NodeID"]: n["Resources"] for n in ray.nodes()}
    for n in nodes:
        have = totals[ids[n["address"]]].get("GPU", 0)
        if have < n["gpus"]:
            say(f"error: node {n['index']} ({n['address']}) needs GPU {n['gpus']}; its Ray node has GPU {have:g}")
            return 2
    run_dir = os.path.expanduser(plan["run_dir"])
    tasks = {n["index"]: NodeTask.options(num_gpus=n["gpus"], scheduling_strategy=NodeAffinitySchedulingStrategy(
        ids[n["address"]], soft=False)).remote() for n in nodes}
    starts = {tasks[n["index"]].start.remote(n["script"], os.path.join(run_dir, n["log"]), run_dir, n["marker"]): n
              for n in nodes}
    waits, reported = {}, False
    while starts:
        ready, _ = ray.wait(list(starts), num_returns=1, timeout=STARTED_WITHIN)
        if not ready and not reported:
            waiting = ", ".join(f"node {n['index']} ({n['address']}) needs GPU {n['gpus']}" for n in starts.values())
            say(f"waiting for resources: {waiting}; other Ray work holds them")
            reported = True
        for ref in ready:
            n = starts.pop(ref)
            say(f"node {n['index']} started (pid {ray.get(ref)})")
            if n["role"] == "trainer":
                waits[tasks[n["index"]].wait.remote()] = n
    while waits:
        (ref,), _ = ray.wait(list(waits), num_returns=1)
        n = waits.pop(ref)
        try:
            code = ray.get(ref)
        except ray.exceptions.RayError as e:  # its actor died: the node or its raylet went away
            say(f"node {n['index']} lost at {time.time():.3f}: {str(e).strip().splitlines()[0]}")
            return 1
        say(f"node {n['index']} ended at {time.time():.3f}: exit code {code}")
        if code:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
