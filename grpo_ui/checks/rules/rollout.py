"""The rollout mode: vLLM colocate or server, async generation, sleep and offload, tensor parallelism, FSDP vs
DeepSpeed."""

from __future__ import annotations

from grpo_ui.checks.rules.base import rule
from grpo_ui.core.findings import Finding, finding
from grpo_ui.spec.fields import ENGINES


@rule
def vllm_mode(spec, eff):
    r = spec.rollout
    if not r.use_vllm and r.vllm_mode is not None:
        yield finding("VLLM-MODE-WITHOUT-VLLM", "error", ("rollout.vllm_mode", "rollout.use_vllm"),
                      "vllm_mode is not supported when use_vllm is false.",
                      "Turn use_vllm on, or clear vllm_mode.", {"rollout.vllm_mode": None})
    if r.use_vllm and r.vllm_mode is None and eff.version >= (3, 5, 0):
        required = eff.version >= (3, 12, 0)
        yield finding("VLLM-MODE-REQUIRED", "error" if required else "info", "rollout.vllm_mode",
                      "vllm_mode is required when use_vllm is true (since ms-swift 3.12)." if required else
                      f"ms-swift {spec.swift_version} defaults vllm_mode to colocate; 3.12+ requires it.",
                      "Choose colocate (vLLM on the training GPUs) or server (swift rollout nodes).",
                      {"rollout.vllm_mode": "colocate"})
    if r.vllm_tensor_parallel_size != 1 and not r.use_vllm:
        yield finding("VLLM-TP-WITHOUT-VLLM", "warning", "rollout.vllm_tensor_parallel_size",
                      f"vllm_tensor_parallel_size is {r.vllm_tensor_parallel_size} but use_vllm is false; "
                      "ms-swift resets it to 1.", "Set it to 1 or turn use_vllm on.",
                      {"rollout.vllm_tensor_parallel_size": 1})


def _async_needs_own_gpus(spec, eff) -> Finding:
    """async_generate rolls out while training: vLLM must not share the training GPUs. From 3.5 that means server
    mode; 3.2–3.4 had no vllm_mode and ran it on GPUs of its own (NPROC_PER_NODE + num_infer_workers = GPUs) or a
    server (vllm_server_host, from 3.3.1)."""
    if eff.version >= (3, 5, 0):
        return finding("ASYNC-NEEDS-SERVER", "error", ("rollout.async_generate", "rollout.vllm_mode"),
                       "async_generate requires vllm_mode server.",
                       "Use server mode with swift rollout nodes, or turn async_generate off.",
                       {"rollout.async_generate": False})
    return finding("ASYNC-NEEDS-SERVER", "error", ("rollout.async_generate", "rollout.num_infer_workers"),
                   f"In ms-swift {spec.swift_version} async_generate needs vLLM on GPUs of its own, but it shares "
                   "all the training GPUs (num_infer_workers is the GPU count).",
                   "Set num_infer_workers below the GPU count (training uses the rest), use a rollout server "
                   "(vllm_server_host, 3.3.1+), or turn async_generate off.", {"rollout.async_generate": False})


@rule
def async_generate(spec, eff):
    r = spec.rollout
    own_gpus = eff.version < (3, 5, 0) and (eff.spare_rollout_gpus or r.vllm_server_host)
    if r.async_generate and not eff.server and not own_gpus:
        yield _async_needs_own_gpus(spec, eff)
    if r.async_generate and spec.train.multi_turn_scheduler:
        yield finding("ASYNC-MULTI-TURN", "error", ("rollout.async_generate", "train.multi_turn_scheduler"),
                      "async_generate is not supported with multi-turn rollouts.", "Turn async_generate off.",
                      {"rollout.async_generate": False})


@rule(engines=ENGINES)
def server_mode(spec, eff):
    r = spec.rollout
    if not eff.server:
        return
    if not eff.server_endpoints:
        yield finding("VLLM-SERVER-NO-HOST", "error", ("rollout.vllm_server_host", "cluster.nodes"),
                      "Server mode needs rollout servers: no rollout node and no vllm_server_host is set.",
                      "Add a node with role rollout on the Cluster page, or set rollout.vllm_server_host.")
    hosts, ports, groups = r.vllm_server_host or [], r.vllm_server_port, r.vllm_server_group_port or []
    if hosts and len(ports) != len(hosts):
        yield finding("VLLM-SERVER-PORTS", "error", ("rollout.vllm_server_host", "rollout.vllm_server_port"),
                      f"{len(hosts)} server host(s) but {len(ports)} port(s): the lists must have the same length.",
                      "Give one port per host.", {"rollout.vllm_server_port": [ports[0]] * len(hosts)})
    n = len(eff.server_endpoints)
    if groups and len(groups) != n:  # ms-swift's VLLMClient: "group_port must be int or list of length num_servers"
        yield finding("VLLM-SERVER-PORTS", "error", "rollout.vllm_server_group_port",
                      f"{len(groups)} group port(s) for {n} server(s): ms-swift takes one per server and fails at "
                      "start-up otherwise.",
                      "Clear vllm_server_group_port to use 51216 + i.", {"rollout.vllm_server_group_port": None})
    if r.vllm_max_model_len is not None:
        yield finding("VLLM-SERVER-MAX-LEN", "warning", "rollout.vllm_max_model_len",
                      "vllm_max_model_len on the trainer is ignored in server mode.",
                      "Set server.vllm_max_model_len (swift rollout) instead.",
                      {"rollout.vllm_max_model_len": None, "server.vllm_max_model_len": r.vllm_max_model_len})


@rule(engines=ENGINES)
def servers_outside(spec, eff):
    """Server mode with vllm_server_host and no rollout node: the servers are outside the job. ms-swift's external
    examples ship their swift rollout line as a comment (started by hand, in another terminal); imported as shipped,
    the trainers would wait for a server nobody starts."""
    if not eff.server or spec.rollout_nodes() or not spec.rollout.vllm_server_host or spec.cluster.external_rollout:
        return
    where = ", ".join(f"{h}:{p}" for h, p in eff.server_endpoints)
    yield finding("ROLLOUT-SERVER-OUTSIDE", "error", ("rollout.vllm_server_host", "cluster.external_rollout"),
                  f"The trainers talk to the rollout server(s) at {where} (vllm_server_host), but no node of this job "
                  f"runs swift rollout: node_0.sh would wait {spec.rollout.vllm_server_timeout:.0f} s for /health/ and "
                  "exit 3. (ms-swift's external-mode examples start the server by hand; their swift rollout line is a "
                  "comment.)",
                  "If you start it yourself before launching, say so: cluster.external_rollout (the job then waits "
                  "for it and preflight checks that it answers). Otherwise add a rollout node to the cluster table "
                  "(role rollout, with its GPUs) and clear rollout.vllm_server_host.",
                  {"cluster.external_rollout": True})


@rule
def sleep_and_offload(spec, eff):
    r = spec.rollout
    if r.sleep_level and not eff.colocate:
        yield finding("SLEEP-LEVEL-IGNORED", "warning", "rollout.sleep_level",
                      f"sleep_level {r.sleep_level} only acts with colocated vLLM; ms-swift forces it to 0 here.",
                      "Set sleep_level to 0.", {"rollout.sleep_level": 0})
    if (r.offload_model or r.offload_optimizer) and not eff.colocate:
        yield finding("OFFLOAD-IGNORED", "warning", ("rollout.offload_model", "rollout.offload_optimizer"),
                      "offload_model / offload_optimizer free GPU memory for colocated vLLM only.",
                      "Turn them off.", {"rollout.offload_model": False, "rollout.offload_optimizer": False})
    if r.sleep_level and eff.colocate and (3, 2, 1) <= eff.version < (3, 4, 0) and eff.grad_accum != 1:
        yield finding("SLEEP-LEVEL-GAS", "info", ("rollout.sleep_level", "train.gradient_accumulation_steps"),
                      f"ms-swift {spec.swift_version} forces gradient_accumulation_steps to 1 when sleep_level > 0.",
                      "Expect GAS 1, or use ms-swift ≥ 3.4.")


@rule(engines=ENGINES)
def tensor_parallel(spec, eff):
    tp, world, nproc = spec.rollout.vllm_tensor_parallel_size, eff.world_size, eff.nproc_per_node
    if not eff.colocate or tp == 1 or not world:
        return
    if world % tp:
        yield finding("VLLM-TP-WORLD", "error", "rollout.vllm_tensor_parallel_size",
                      f"vllm_tensor_parallel_size ({tp}) must divide the world size ({world}) evenly.",
                      f"Use a TP size that divides {world}: {[d for d in range(1, nproc + 1) if world % d == 0]}.")
    elif nproc % tp:
        yield finding("VLLM-TP-WORLD", "error", "rollout.vllm_tensor_parallel_size",
                      f"TP groups are consecutive ranks: TP {tp} must divide the GPUs per node ({nproc}) so a group "
                      "never spans two nodes.", f"Use a TP size that divides {nproc}.")


@rule
def fsdp_deepspeed(spec, eff):
    if spec.train.fsdp and spec.train.deepspeed:
        yield finding("FSDP-DEEPSPEED", "error", ("train.fsdp", "train.deepspeed"),
                      "FSDP2 is not compatible with DeepSpeed.", "Clear one of train.fsdp and train.deepspeed.",
                      {"train.fsdp": None})
