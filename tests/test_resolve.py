"""grpo_ui.spec.resolve: a job's effective values, checked against ms-swift's own arithmetic where it can run here (its
argument classes' post-init methods in the ms-swift 4.6 venv) and against the documented formulas elsewhere; and
computed once per job by the steps that take a Resolved."""

import itertools
import json
import subprocess

import pytest

from grpo_ui.checks import assess, rules
from grpo_ui.knowledge.catalog import find_model, from_hf_config
from grpo_ui.launch import render
from grpo_ui.spec import resolve
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes

BATCH_ERRORS = {"GRPO-GEN-BATCH-DIV", "GRPO-GEN-BATCH-MISMATCH", "GRPO-STEPS-PER-GEN", "GRPO-BATCH-DIV"}

# ms-swift's own post-init steps, run on a plain namespace holding RLHFArguments' defaults and the case's values:
# _init_grpo (beta), _set_default (gradient_accumulation_steps), _init_generation_batch_params (the generation batch).
PROBE = r"""
import dataclasses, json, sys, types
from swift.arguments import RLHFArguments
from swift.rlhf_trainers.args_mixin import GRPOArgumentsMixin
base = {}
for f in dataclasses.fields(RLHFArguments):
    if f.default is not dataclasses.MISSING:
        base[f.name] = f.default
    elif f.default_factory is not dataclasses.MISSING:
        base[f.name] = f.default_factory()
out = []
for case in json.load(sys.stdin):
    ns = types.SimpleNamespace(**{**base, "rlhf_type": "grpo", "use_vllm": False, "eval_strategy": "no", **case})
    try:
        RLHFArguments._init_grpo(ns)
        RLHFArguments._set_default(ns)
        GRPOArgumentsMixin._init_generation_batch_params(ns)
        out.append({"beta": ns.beta, "gradient_accumulation_steps": ns.gradient_accumulation_steps,
                    "steps_per_generation": ns.steps_per_generation, "generation_batch_size": ns.generation_batch_size})
    except ValueError as e:
        out.append({"error": str(e)})
print(json.dumps(out))
"""


def job(nnodes=1, nproc=1, **changes) -> JobSpec:
    nodes = [{"host": f"n{k}", "gpus": list(range(nproc))} for k in range(nnodes)]
    return with_changes(JobSpec(), {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.dataset": ["d"],
                                    "train.reward_funcs": ["accuracy"], "cluster.nodes": nodes, **changes})


def cases():
    """Layouts × batch knobs (set or left to ms-swift), beta cycling through unset, 0 and a value."""
    grid = itertools.product((1, 2, 3), ((1, 1), (1, 4), (2, 4), (3, 2)), (None, 2), (None, 0, 1, 4),
                             (None, 16, 24), (2, 4, 8))
    for k, (per_device, (nnodes, nproc), accum, steps, gen_batch, gens) in enumerate(grid):
        changes = {"train.per_device_train_batch_size": per_device, "train.num_generations": gens,
                   "train.beta": (None, 0.0, 0.1)[k % 3]}
        for path, value in (("gradient_accumulation_steps", accum), ("steps_per_generation", steps),
                            ("generation_batch_size", gen_batch)):
            if value is not None:
                changes[f"train.{path}"] = value
        yield job(nnodes, nproc, **changes)


@pytest.mark.slow
def test_effective_batch_values_and_beta_are_ms_swifts(swift_python):
    """For every case ms-swift accepts, beta, gradient_accumulation_steps, steps_per_generation and
    generation_batch_size are the ones it computes; every case it rejects is a batch error finding, and no case it
    accepts is one."""
    specs = list(cases())
    resolved = [resolve.resolve(s) for s in specs]
    probe = [{"world_size": eff.world_size, **{k: v for k, v in s.train.model_dump().items() if k in (
        "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size",
        "num_generations", "beta", "reward_funcs")}} for s, eff in zip(specs, resolved, strict=True)]
    proc = subprocess.run([str(swift_python), "-c", PROBE], input=json.dumps(probe), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    rejected = 0
    for spec, eff, swift in zip(specs, resolved, theirs, strict=True):
        ours = {f.id for f in rules.validate(eff) if f.severity == "error"} & BATCH_ERRORS
        if "error" in swift:
            rejected += 1
            assert ours, (spec.train.model_dump(exclude_unset=True), eff.world_size, swift["error"])
            continue
        assert not ours, (spec.train.model_dump(exclude_unset=True), eff.world_size, ours)
        assert (eff.beta, eff.grad_accum, eff.steps_per_generation, eff.generation_batch) == (
            swift["beta"], swift["gradient_accumulation_steps"], swift["steps_per_generation"],
            swift["generation_batch_size"]), spec.train.model_dump(exclude_unset=True)
    assert 0 < rejected < len(specs)  # both kinds of case are in the grid


def test_before_3_7_grpo_accumulates_like_sft():
    """ms-swift < 3.7 left gradient_accumulation_steps to TrainingArguments: ceil(16 / (per_device × world))
    (swift/trainers/arguments.py; GRPO's default of 1 came in 3.7, commit 0d82efc2e)."""
    assert resolve.resolve(job(1, 4, swift_version="3.6")).grad_accum == 4
    assert resolve.resolve(job(2, 4, swift_version="3.6", **{"train.per_device_train_batch_size": 3})).grad_accum == 1
    assert resolve.resolve(job(1, 4, swift_version="3.7")).grad_accum == 1
    eff = resolve.resolve(job(1, 4, swift_version="3.4", **{"train.gradient_accumulation_steps": 2}))
    assert eff.steps_per_generation == 2 and eff.generation_batch == 8  # 3.4.x checks per_device × world × GAS


def test_layout_values():
    spec = with_changes(JobSpec(), {
        "rollout.use_vllm": True, "rollout.vllm_mode": "server", "rollout.vllm_server_group_port": [6000, 6001],
        "cluster.nodes": [{"host": "a", "address": "10.0.0.1", "gpus": [0, 1, 2, 3], "gpu_model": "H100 80GB HBM3"},
                          {"host": "b", "gpus": [0, 1, 2, 3]},
                          {"host": "r1", "role": "rollout", "gpus": [0, 1], "gpu_memory_gib": 48},
                          {"host": "r2", "role": "rollout", "gpus": [0, 1]}]})
    eff = resolve.resolve(spec)
    assert (eff.vllm_mode, eff.nnodes, eff.nproc_per_node, eff.world_size, eff.spare_rollout_gpus) == (
        "server", 2, 4, 8, 0)
    assert eff.master_addr == "10.0.0.1" and eff.server_endpoints == (("r1", 8000), ("r2", 8000))
    assert eff.group_ports == (6000, 6001) and eff.rollout_port(1) == 8000
    assert (eff.trainer.model, eff.trainer.gib) == ("NVIDIA H100 80GB HBM3", 79.65)
    assert (eff.rollout.nodes, eff.rollout.per_node, eff.rollout.gib) == (2, 2, 48)
    assert eff.launch_env(1, spec.cluster.nodes[1]) == {
        "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "NPROC_PER_NODE": "4",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    listed = resolve.resolve(with_changes(spec, {"rollout.vllm_server_host": ["x", "y"],
                                                 "rollout.vllm_server_port": [8001, 8002],
                                                 "rollout.vllm_server_group_port": None}))
    assert listed.server_endpoints == (("x", 8001), ("y", 8002)) and listed.group_ports == (51216, 51217)
    assert listed.rollout_port(1) == 8002


def test_3_2_to_3_4_spare_gpus_train_on_the_rest():
    """num_infer_workers below the GPU count: vLLM alone on the last ones (v3.2.1 grpo_trainer.py)."""
    spec = job(1, 4, swift_version="3.2", **{"rollout.use_vllm": True, "rollout.num_infer_workers": 1})
    eff = resolve.resolve(spec)
    assert (eff.vllm_mode, eff.spare_rollout_gpus, eff.nproc_per_node, eff.world_size) == ("colocate", 1, 3, 3)
    assert resolve.resolve(with_changes(spec, {"rollout.num_infer_workers": 4})).spare_rollout_gpus == 0


def test_rollout_steps_output_dir_and_architecture():
    """A rollout every steps_per_generation × num_iterations micro-steps (grpo_trainer.py generate_every)."""
    assert resolve.rollout_steps(4, 4) == 1 and resolve.rollout_steps(8, 2, 2) == 8 and resolve.rollout_steps(1, 4) == 1
    eff = resolve.resolve(job(**{"train.steps_per_generation": 8, "train.gradient_accumulation_steps": 2}))
    assert eff.rollout_steps == 4 and eff.output_dir == "output/Qwen2.5-7B-Instruct" and eff.beta == 0.04
    assert eff.arch is find_model("Qwen/Qwen2.5-7B-Instruct") and eff.dialect == "4.1+"
    pasted = from_hf_config({"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                             "num_hidden_layers": 2, "vocab_size": 100}, name="mine")
    assert resolve.resolve(eff, pasted).arch is pasted and resolve.resolve(eff) is eff
    assert resolve.resolve(job(**{"train.model": "acme/unknown-7b"})).arch is None


def test_a_resolved_job_is_computed_once(monkeypatch):
    """The assessment and render given a Resolved use its values: nothing is resolved again."""
    eff = resolve.resolve(job(1, 2, **{"cluster.nodes[0].gpu_model": "H100 80GB HBM3"}))
    calls = []
    real = resolve._grad_accum
    monkeypatch.setattr(resolve, "_grad_accum", lambda *a: calls.append(a) or real(*a))
    assess.assess(eff)
    render.render(eff, "job-1")
    assert calls == []
    assess.assess(eff.spec)
    assert len(calls) == 1
