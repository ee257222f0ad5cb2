"""The machines imported scripts describe: trainer nodes from NNODES/NODE_RANK/MASTER_*/NPROC_PER_NODE/
CUDA_VISIBLE_DEVICES, rollout nodes from ``swift rollout`` scripts, the environment common to every node, and where
the scripts disagree. Launch variables are grpo-ui's to set (spec.RESERVED_ENV): a script's value that differs from
what grpo-ui renders for that node is a finding, never a node env override."""

from __future__ import annotations

from grpo_ui.core.findings import Finding, finding
from grpo_ui.importer.build import Call, Draft
from grpo_ui.spec.fields import parse_version
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.names import LAUNCH_ENV, is_loopback, is_secret_name
from grpo_ui.spec.resolve import resolve

SHARED_WITH_ROLLOUT = ("model_type", "template", "external_plugins", "multi_turn_scheduler")  # rollout_command adds


def int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _gpus(call: Call, fallback: int, draft: Draft) -> list[int]:
    """CUDA_VISIBLE_DEVICES as a list of ids, else 0 … fallback-1."""
    cvd = call.text("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return list(range(max(fallback, 1)))
    ids = [x.strip() for x in cvd.split(",") if x.strip()]
    if ids and all(x.isdigit() for x in ids):
        return [int(x) for x in ids]
    draft.findings.append(finding("IMPORT-GPU-IDS", "warning", "cluster.nodes", f"{call.source}: "
                                  f"CUDA_VISIBLE_DEVICES={cvd} is not a list of GPU indices; GPUs 0…{fallback - 1} "
                                  "were assumed.", "Set the node's GPU ids on the Cluster page."))
    return list(range(max(fallback, 1)))


def _nproc_finding(call: Call, gpus: list[int], nproc: int, vllm: bool) -> Finding | None:
    """Seed 003: NPROC_PER_NODE that does not match the visible GPUs (ms-swift's is_mp / V12)."""
    if nproc == len(gpus):
        return None
    severity = "error" if len(gpus) % nproc or (vllm and len(gpus) >= 2 * nproc) else "warning"
    return finding("IMPORT-NPROC-GPUS", severity, "cluster.nodes", f"{call.source}: NPROC_PER_NODE={nproc} but "
                   f"CUDA_VISIBLE_DEVICES lists {len(gpus)} GPU(s). ms-swift then splits each process's model over "
                   f"{len(gpus) // max(nproc, 1)} GPUs (device_map), which GRPO with vLLM refuses; nodes that disagree "
                   "here were a cause of multi-node hangs (field report 003). Kept as the script says.",
                   "Make NPROC_PER_NODE equal the number of GPUs in CUDA_VISIBLE_DEVICES.")


def _spare_vllm_gpus(draft: Draft, nproc: int, gpus: int) -> bool:
    """ms-swift 3.2–3.4 put vLLM alone on the last num_infer_workers GPUs (its default 1) when NPROC_PER_NODE + workers
    is the GPU count; grpo-ui's unset num_infer_workers means vLLM on every GPU, so the script's layout is written."""
    rollout = draft.data.setdefault("rollout", {})
    if not ((3, 2, 0) <= parse_version(draft.data["swift_version"]) < (3, 5, 0) and rollout.get("use_vllm") is True):
        return False
    workers = rollout.get("num_infer_workers") or 1
    if nproc + workers != gpus:
        return False
    rollout["num_infer_workers"] = workers
    return True


def trainer_nodes(trainers: list[Call], draft: Draft) -> list[dict]:
    """One node per trainer script (or NNODES copies of a single script run on every node)."""
    vllm = draft.data.get("rollout", {}).get("use_vllm") is True
    nodes = []
    for call in trainers:
        nproc = int_or_none(call.text("NPROC_PER_NODE"))
        gpus = _gpus(call, nproc or 1, draft)
        if nproc and (found := _nproc_finding(call, gpus, nproc, vllm)):
            if not _spare_vllm_gpus(draft, nproc, len(gpus)):
                draft.findings.append(found)
        nodes.append({"host": "node0", "gpus": gpus})
    nnodes = int_or_none(trainers[0].text("NNODES"))
    if len(trainers) == 1 and nnodes and nnodes > 1:
        nodes += [dict(nodes[0]) for _ in range(nnodes - 1)]
        draft.findings.append(finding("IMPORT-ONE-SCRIPT-NODES", "info", "cluster.nodes", f"{trainers[0].source} "
                                      f"says NNODES={nnodes}: it is the script every node runs with its own "
                                      f"NODE_RANK, so {nnodes} trainer nodes were created.",
                                      "Set each node's host on the Cluster page."))
    elif nnodes and nnodes != len(trainers):
        draft.findings.append(finding("IMPORT-NNODES", "warning", "cluster.nodes", f"NNODES={nnodes} but "
                                      f"{len(trainers)} trainer script(s) were imported.",
                                      "Import one script per node, or fix NNODES."))
    return nodes


def cluster(trainers: list[Call], servers: list[Call], draft: Draft) -> None:
    """Fill data['cluster'], data['env'] and data['secret_env'] from the calls."""
    nodes = trainer_nodes(trainers, draft)
    masters = [m for c in trainers if (m := c.text("MASTER_ADDR"))]
    routable = next((m for m in masters if not is_loopback(m)), None)
    for rank, node in enumerate(nodes):
        node["host"] = (routable or "localhost") if rank == 0 and (routable or len(nodes) == 1) else f"node{rank}"
    hosts = draft.data.get("rollout", {}).get("vllm_server_host") or []
    for i, call in enumerate(servers):
        tp_dp = [int(f.values[0].text) for f in call.flags if f.name.endswith(("tensor_parallel_size",
                 "data_parallel_size")) and f.values and f.values[0].text.isdigit()]
        size = tp_dp[0] * tp_dp[1] if len(tp_dp) == 2 else (tp_dp[0] if tp_dp else 1)
        nodes.append({"host": hosts[i] if i < len(hosts) else f"rollout{i}", "role": "rollout",
                      "gpus": _gpus(call, size, draft)})
    if len(nodes) > 1:
        draft.findings.append(finding("IMPORT-SET-HOSTS", "info", "cluster.nodes", "Scripts say which address node 0 "
                                      "and the rollout servers listen on, not which machine runs each script; "
                                      "placeholder names were used where they say nothing.",
                                      "Set each node's host (or ssh-config alias) on the Cluster page."))
    data = {"nodes": nodes}
    master = routable or (masters[0] if masters else None)
    if master:
        data["master_addr"] = master
    if (port := trainers[0].text("MASTER_PORT")) is not None and port.isdigit():
        data["master_port"] = int(port)
    draft.data["cluster"] = data
    environment(trainers, servers, draft)


def environment(trainers: list[Call], servers: list[Call], draft: Draft) -> None:
    """Variables every node's command gets go to env; the others to that node's env; secrets by name only."""
    calls = trainers + servers
    per_call = []
    for call in calls:
        launch = LAUNCH_ENV if call.kind == "rlhf" else ("CUDA_VISIBLE_DEVICES",)
        env = {}
        for key, word in call.env.items():
            if key in launch:
                if word.unresolved:
                    draft.unresolved(f"env.{key}", word.unresolved, call.source, word.line, key)
                continue
            if is_secret_name(key):
                if key not in draft.data.setdefault("secret_env", []):
                    draft.data["secret_env"].append(key)
                    draft.findings.append(finding("IMPORT-SECRET", "info", "secret_env", f"{key} looks like a "
                                                  "secret; its value was not imported.", f"Enter {key} on the Launch "
                                                  "page; it travels in a 0600 file."))
            elif word.unresolved:
                draft.unresolved(f"env.{key}", word.unresolved, call.source, word.line, key)
            else:
                env[key] = word.text
        per_call.append(env)
    common = {k: v for k, v in per_call[0].items() if all(e.get(k) == v for e in per_call)}
    draft.data["env"] = common
    nodes = draft.data["cluster"]["nodes"]
    for i, env in enumerate(per_call):
        own = {k: v for k, v in env.items() if k not in common}
        if own:
            node = nodes[i] if i < len(trainers) else nodes[len(nodes) - len(servers) + i - len(trainers)]
            node["env"] = own


def launch_env_findings(spec: JobSpec, trainers: list[Call], draft: Draft) -> None:
    """Where a script sets a launch variable to something other than what grpo-ui renders for its node, say so (rank
    0's MASTER_ADDR=127.0.0.1 is the same rendezvous as node 0's address, so it passes)."""
    eff = resolve(spec)
    index = [i for i, _ in spec.numbered("trainer")]  # rank → its node
    for rank, call in enumerate(trainers):
        expected = eff.launch_env(rank, spec.cluster.nodes[index[rank]])
        own = {k: text for k in LAUNCH_ENV if (text := call.text(k)) is not None and text != expected[k]
               and k not in ("NNODES", "NPROC_PER_NODE")  # IMPORT-NNODES and IMPORT-NPROC-GPUS say those
               and not (k == "MASTER_ADDR" and rank == 0 and is_loopback(text))}
        if "NODE_RANK" in own:
            draft.findings.append(finding("IMPORT-NODE-RANK", "warning", "cluster.nodes", f"{call.source} says "
                                          f"NODE_RANK={own.pop('NODE_RANK')} but it is trainer script {rank} of "
                                          f"{len(trainers)}; it is rendered as rank {rank}.",
                                          "Give each node script its own NODE_RANK, 0 … NNODES-1."))
        for key, text in own.items():
            draft.findings.append(finding("IMPORT-LAUNCH-ENV", "warning", f"cluster.nodes[{index[rank]}]",
                                          f"{call.source} sets {key}={text}; grpo-ui sets the launch variables "
                                          f"itself and renders {key}={expected[key]} for this node.",
                                          "If the script's value was meant, say it through the cluster settings: "
                                          "the node's gpus, cluster.master_addr or cluster.master_port."))


def disagreements(trainers: list[Call]) -> list[Finding]:
    """Node scripts must run identical arguments and agree on the rendezvous (seed 003)."""
    out = []
    masters = {m for c in trainers if (m := c.text("MASTER_ADDR")) and not is_loopback(m)}
    if len(masters) > 1:
        out.append(finding("NODE-ENV-DIFFER", "error", "cluster.master_addr", f"The node scripts name different "
                           f"masters: MASTER_ADDR {', '.join(sorted(masters))}.", "Every node must use node 0's "
                           "address as MASTER_ADDR (node 0 itself may say 127.0.0.1)."))
    base = {f.name: [w.text for w in f.values] for f in trainers[0].flags}
    for call in trainers[1:]:
        mine = {f.name: [w.text for w in f.values] for f in call.flags}
        for name in sorted(set(base) | set(mine)):
            if base.get(name) != mine.get(name):
                out.append(finding("NODE-ARGS-DIFFER", "error", "cluster.nodes",
                                   f"{call.source} has --{name} {' '.join(mine.get(name, ['(unset)']))} but "
                                   f"{trainers[0].source} has {' '.join(base.get(name, ['(unset)']))}.",
                                   "Every node must run identical arguments; grpo-ui renders one set for all nodes."))
        for key in ("NNODES", "NPROC_PER_NODE", "MASTER_PORT"):
            if trainers[0].text(key) != call.text(key):
                out.append(finding("NODE-ENV-DIFFER", "error", "cluster.nodes", f"{call.source} has {key}="
                                   f"{call.text(key)} but {trainers[0].source} has {key}={trainers[0].text(key)}.",
                                   f"Use the same {key} on every node."))
    return out
