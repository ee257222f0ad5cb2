"""The cluster: trainer nodes, GPUs per node, shared GPUs, rendezvous addresses and ports."""

from __future__ import annotations

from grpo_ui.checks.rules.base import rule
from grpo_ui.core.findings import finding
from grpo_ui.spec.fields import ENGINES
from grpo_ui.spec.names import is_loopback, is_placeholder


@rule(engines=ENGINES)
def cluster(spec, eff):
    trainers, rollouts = spec.trainer_nodes(), spec.rollout_nodes()
    if not trainers:
        yield finding("CLUSTER-NO-TRAINER", "error", "cluster.nodes", "No node has the trainer role.",
                      "Add at least one trainer node.")
        return
    counts = {len(n.gpus) for n in trainers}
    if len(counts) > 1:
        detail = ", ".join(f"{n.host}: {len(n.gpus)}" for n in trainers)
        yield finding("TRAINER-GPU-COUNT", "error", "cluster.nodes",
                      f"Trainer nodes use different GPU counts ({detail}); NPROC_PER_NODE must be the same on every "
                      "node and equal to the visible GPUs.", "Give every trainer node the same number of GPUs.")
    if rollouts and eff.vllm_mode in ("none", "colocate"):  # (Ray mode's separate placement uses them)
        yield finding("CLUSTER-ROLLOUT-UNUSED", "warning", "rollout.vllm_mode",
                      f"{len(rollouts)} rollout node(s) are set but vllm_mode is not server; they would sit idle.",
                      "Switch to server mode, or remove the rollout nodes.", {"rollout.vllm_mode": "server"})
    if eff.server:
        tp, dp = spec.server.vllm_tensor_parallel_size, spec.server.vllm_data_parallel_size
        for i, n in enumerate(spec.cluster.nodes):
            if n.role == "rollout" and len(n.gpus) < tp * dp:
                yield finding("ROLLOUT-GPUS", "error", f"cluster.nodes[{i}].gpus",
                              f"Rollout node {n.host} has {len(n.gpus)} GPU(s) but TP {tp} × DP {dp} = {tp * dp}.",
                              f"Give it {tp * dp} GPUs or lower server TP/DP.")
            elif n.role == "rollout" and len(n.gpus) > tp * dp:
                yield finding("ROLLOUT-GPUS", "warning", f"cluster.nodes[{i}].gpus",
                              f"Rollout node {n.host} has {len(n.gpus)} GPUs but TP × DP uses {tp * dp}.",
                              f"Raise server.vllm_data_parallel_size to {len(n.gpus) // tp}.",
                              {"server.vllm_data_parallel_size": len(n.gpus) // tp})
    ssh = spec.cluster.backend in ("ssh", "ray")  # on Slurm the nodes' hosts are not used: Slurm picks the machines
    seen: dict[str, tuple[int, set[int]]] = {}
    for i, n in enumerate(spec.cluster.nodes if ssh else []):
        key = n.routable
        if key in seen and seen[key][1] & set(n.gpus):
            overlap = sorted(seen[key][1] & set(n.gpus))
            yield finding("CLUSTER-GPU-OVERLAP", "error", (f"cluster.nodes[{seen[key][0]}].gpus",
                                                           f"cluster.nodes[{i}].gpus"),
                          f"Nodes {seen[key][0]} and {i} both use GPU(s) {overlap} on {key}: the processes would "
                          "oversubscribe them (out of memory or a stall, field report 000).",
                          "Give each node on the same machine its own GPU ids.")
        seen.setdefault(key, (i, set()))[1].update(n.gpus)
    master = eff.master_addr
    if ssh and len(trainers) > 1 and (is_loopback(master) or any(n.is_local for n in trainers)):
        yield finding("MASTER-LOOPBACK", "error", ("cluster.master_addr", "cluster.nodes[0].host"),
                      f"NNODES is {len(trainers)} but MASTER_ADDR is {master} (or a trainer is localhost): the other "
                      "nodes cannot reach a loopback address and would hang at rendezvous.",
                      "Use node 0's routable IP or hostname (set cluster.master_addr or node 0's address).")
    ports = {"cluster.master_port": eff.master_port}
    if eff.server:
        ports["server.port"] = spec.server.port
    if len(set(ports.values())) < len(ports):
        yield finding("PORT-CLASH", "error", tuple(ports), f"The rendezvous port and the rollout server port are both "
                      f"{eff.master_port}.", "Use different ports (e.g. 29500 and 8000).")


@rule(engines=ENGINES)
def placeholder_address(spec, eff):
    """Addresses an example script left for the user to fill in (ms-swift's multi-node example: node 1's
    MASTER_ADDR=xxx.xxx.xxx.xxx, which the import makes node 0's host): said at once, on their fields, not by an SSH
    test later."""
    ssh = spec.cluster.backend in ("ssh", "ray")  # on Slurm the nodes' hosts and the master are Slurm's
    given = [(f"cluster.nodes[{i}].{name}", value) for i, n in enumerate(spec.cluster.nodes if ssh else [])
             for name in ("host", "address") if (value := getattr(n, name))]
    given += [("cluster.master_addr", spec.cluster.master_addr)] if ssh and spec.cluster.master_addr else []
    given += [("rollout.vllm_server_host", h) for h in spec.rollout.vllm_server_host or []]
    found = {path: value for path, value in given if is_placeholder(value)}
    if not found:
        return
    hosts = [p for p in found if p != "cluster.master_addr"]
    fix = (f"Set {', '.join(hosts)} to the machine's IP address, host name or ~/.ssh/config alias" if hosts else "")
    if "cluster.master_addr" in found:
        fix += ("; c" if fix else "C") + "lear cluster.master_addr (node 0's address is then used)"
    yield finding("ADDRESS-PLACEHOLDER", "error", tuple(found),
                  f"{', '.join(f'{p} is {v}' for p, v in found.items())}: a stand-in an example script leaves for "
                  "you to fill in (ms-swift's multi-node examples write MASTER_ADDR=xxx.xxx.xxx.xxx). No machine has "
                  "it, so SSH, the rendezvous or the rollout requests would fail.", fix + ".",
                  {} if hosts else {"cluster.master_addr": None})
