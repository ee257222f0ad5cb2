"""Each fact has one home (issue 24): where two modules wrote the same ms-swift fact or grpo-ui convention and their
copies disagreed, the test that would have caught it, now asking the one owner."""

import json

import pytest

from grpo_ui.backends.base import Handle
from grpo_ui.backends.preflight.facts import HostFacts
from grpo_ui.backends.preflight.host import host_findings
from grpo_ui.backends.slurm import SlurmHandle
from grpo_ui.backends.ssh import SshHandle
from grpo_ui.checks.assess import assess
from grpo_ui.checks.fit import suggest
from grpo_ui.importer import import_scripts
from grpo_ui.jobs.memory_loop import gpu_roles
from grpo_ui.jobs.service import HANDLE, Jobs
from grpo_ui.jobs.store import Store
from grpo_ui.launch.plan import default_job_id, make_plan
from grpo_ui.launch.runfiles import NodeFiles
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.names import LAUNCH_ENV, RESERVED_ENV, is_loopback, is_secret_name
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import resolve

BASE = {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.dataset": ["d"], "train.reward_funcs": ["accuracy"],
        "train.num_generations": 4, "train.dataloader_num_workers": 4, "rollout.use_vllm": True,
        "rollout.vllm_mode": "colocate", "rollout.vllm_gpu_memory_utilization": 0.5,
        "cluster.nodes": [{"host": "gpu-a", "gpus": [0, 1, 2, 3], "gpu_model": "A100 80GB"}]}
TWO_NODES = [{"host": "gpu-a", "gpus": [0, 1]}, {"host": "gpu-b", "gpus": [0, 1]}]


def job(**changes) -> JobSpec:
    return with_changes(JobSpec(), {**BASE, **{k.replace("__", "."): v for k, v in changes.items()}})


def ids(spec) -> set[str]:
    return {f.id for f in assess(spec).findings}


# Secret names: spec.names.is_secret_name (the spec, the importer and SECURITY.md's rule)

@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN", "WANDB_API_KEY",
                                  "OPENAI_API_KEY", "SWANLAB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"])
def test_what_users_keep_secret_is_a_secret(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "IMAGE_MAX_TOKEN_NUM", "VIDEO_MAX_TOKEN_NUM",
                                  "HF_TOKEN_PATH", "NCCL_SOCKET_IFNAME", "WANDB_PROJECT", "MAX_PIXELS"])
def test_what_a_job_needs_as_it_is_is_not_a_secret(name):
    """The importer once read TOKEN or KEY anywhere in a name as a secret, the spec only at the end."""
    assert not is_secret_name(name)
    spec, _ = import_scripts([("run.sh", f"export {name}=1\nswift rlhf --rlhf_type grpo --model m --dataset d "
                                          "--reward_funcs accuracy\n")])
    assert spec.env == {name: "1"} and spec.secret_env == []


# Launch variables: spec.names.LAUNCH_ENV (the importer, the rendered scripts' values, the names a spec may not set)

def test_the_launch_variables_are_the_ones_every_node_script_sets():
    eff = resolve(job(cluster__nodes=TWO_NODES, cluster__master_addr="10.0.0.1"))
    assert tuple(eff.launch_env(1, eff.spec.cluster.nodes[1])) == LAUNCH_ENV
    assert set(LAUNCH_ENV) < set(RESERVED_ENV)


# Loopback addresses: spec.names.is_loopback (the rendezvous rule, the importer, local nodes, the app's bind address)

@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.0.1.1", "::1"])
def test_every_loopback_address_is_unreachable_for_other_nodes(host):
    """127.0.1.1 is the address Debian maps the machine's own name to: the rules' list of three missed it."""
    assert is_loopback(host)
    assert "MASTER-LOOPBACK" in ids(job(cluster__nodes=TWO_NODES, cluster__master_addr=host))


@pytest.mark.parametrize("host", ["10.0.0.1", "gpu-a", "0.0.0.0", "fe80::1", ""])
def test_other_addresses_are_not_loopback(host):
    assert not is_loopback(host)


def test_an_imported_master_on_any_loopback_address_is_node_0_itself():
    node = ("export NNODES=2 NODE_RANK={rank} MASTER_ADDR={master} NPROC_PER_NODE=2 CUDA_VISIBLE_DEVICES=0,1\n"
            "swift rlhf --rlhf_type grpo --model m --dataset d --reward_funcs accuracy\n")
    spec, findings = import_scripts([("n0.sh", node.format(rank=0, master="127.0.1.1")),
                                     ("n1.sh", node.format(rank=1, master="10.1.1.1"))])
    assert spec.cluster.master_addr == "10.1.1.1" and "NODE-ENV-DIFFER" not in {f.id for f in findings}


# DeepSpeed: knowledge.engines.zero_config, read once through Resolved.zero (seeds, make-it-fit, the estimate)

def zero3_file(tmp_path, offload=False) -> str:
    path = tmp_path / "ds.json"
    zero = {"stage": 3, **({"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}} if offload
                           else {})}
    path.write_text(json.dumps({"zero_optimization": zero}))
    return str(path)


def test_a_zero3_json_file_is_zero3_to_the_seeds_and_make_it_fit(tmp_path):
    """The seeds read 'zero3' from the string and make-it-fit compared preset names: a ZeRO-3 JSON file was missed by
    SEED-ZERO3-KL0 and offered 'DeepSpeed zero2' as a step up."""
    spec = job(train__deepspeed=zero3_file(tmp_path), train__gradient_accumulation_steps=8)
    assert "SEED-ZERO3-KL0" in ids(spec)
    tight = with_changes(spec, {"cluster.nodes[0].gpu_model": "NVIDIA A10", "train.tuner_type": "full"})
    offered = [s.changes.get("train.deepspeed") for s in suggest(tight, limit=50)]
    assert "zero2" not in offered and "zero3" not in offered


def test_a_zero_offload_json_file_is_offload_to_the_seeds(tmp_path):
    spec = job(train__deepspeed=zero3_file(tmp_path, offload=True))
    found = {f.id: f for f in assess(spec).findings}
    assert "SEED-OFFLOAD-SMALL" in found and found["SEED-OFFLOAD-SMALL"].apply["train.deepspeed"] == "zero3"


# The reference model: Resolved.reference_model (the estimate, the seeds, make-it-fit)

@pytest.mark.parametrize("changes, loaded", [
    ({"train.tuner_type": "full"}, True),
    ({"train.tuner_type": "full", "train.beta": 0.0}, False),
    ({"train.tuner_type": "full", "train.ref_model": "Qwen/Qwen2.5-1.5B-Instruct"}, True),
    ({}, False),  # LoRA: the base model with the adapter off is the reference
    ({"train.ref_model": "Qwen/Qwen2.5-1.5B-Instruct"}, True),  # refused by ms-swift (REF-MODEL-LORA), counted
])
def test_the_estimate_the_seeds_and_make_it_fit_agree_on_the_reference_model(changes, loaded):
    spec = with_changes(job(), changes)
    eff = resolve(spec)
    report = estimate_spec(eff)
    assert bool(eff.reference_model) == loaded
    assert any(a.startswith("reference model") for a in report.assumptions) == loaded
    assert ("SEED-REF-MODEL" in ids(spec)) == (loaded and spec.train.tuner_type == "full")
    oom = with_changes(spec, {"cluster.nodes[0].gpu_model": "NVIDIA A10"})
    offered = {k for s in suggest(oom, limit=100) for k in s.changes}
    assert ("train.beta" in offered) <= loaded


# Whether vLLM fits its share: the estimate's (memory.report.VllmShare); the seed advisory says it in the same numbers

def test_the_vllm_advisory_gives_the_estimates_numbers():
    """SEED-VLLM-UTIL-LOW had its own arithmetic (2 bytes × billions ÷ TP, as GiB): 65.5 GiB of 32B weights where
    the estimate counts 61.0."""
    spec = job(train__model="Qwen/Qwen2.5-32B-Instruct", rollout__vllm_gpu_memory_utilization=0.6)
    a = assess(spec)
    share = a.memory.trainer.vllm
    advisory = next(f for f in a.findings if f.id == "SEED-VLLM-UTIL-LOW")
    assert not share.starts and f"its weights take {share.weights_gib:.1f} GiB (TP 1)" in advisory.message
    assert "MEMORY-VLLM-START" in {f.id for f in a.findings}
    fixed = with_changes(spec, advisory.apply)
    assert with_changes(spec, advisory.apply).rollout.vllm_gpu_memory_utilization > 0.6
    assert assess(fixed).memory.trainer.vllm.starts


def test_a_rollout_that_wants_more_sequences_than_the_kv_cache_holds_is_the_advisory():
    spec = job(rollout__vllm_max_num_seqs=256, train__max_completion_length=8192,
               rollout__vllm_gpu_memory_utilization=0.3)
    share = assess(spec).memory.trainer.vllm
    assert share.starts and share.sequences_held < 256
    assert "SEED-VLLM-UTIL-LOW" in ids(spec)
    assert "SEED-VLLM-UTIL-LOW" not in ids(with_changes(spec, {"rollout.vllm_max_num_seqs": share.sequences_held}))


# Server mode: Resolved.vllm_mode (preflight read the raw vllm_mode field)

def test_preflight_reads_server_mode_as_resolved():
    facts = HostFacts("gpu-a", reachable=True, python="3.11", versions={"ms-swift": "4.6.0"}, proxy=["http_proxy"])
    off = resolve(job(rollout__use_vllm=False, rollout__vllm_mode="server"))  # vLLM off: no server mode
    assert "PREFLIGHT-PROXY" not in {f.id for f in host_findings(off, 0, facts)}
    server = resolve(job(rollout__vllm_mode="server", rollout__vllm_server_host=["r"]))
    assert "PREFLIGHT-PROXY" in {f.id for f in host_findings(server, 0, facts)}


# The backend handle: typed per backend (backends.ssh.SshHandle, backends.slurm.SlurmHandle), (de)serialised in one
# place (backends.base.Handle); the rows of jobs launched before still load, and are written back the same.

OLD_SSH = ('{"backend": "ssh", "job": "wl-1", "tag": "a1b2c3d4e5f6", "run_dir": "/tmp/runs/wl-1", "nodes": ['
           '{"index": 0, "role": "trainer", "rank": 0, "script": "node_0.sh", "tried": true, "pid": 4242, '
           '"pgid": 4242, "start": "123456"}, '
           '{"index": 1, "role": "rollout", "rank": null, "script": "rollout_0.sh", "tried": false}]}')
OLD_SLURM = ('{"backend": "slurm", "job": "17", "run_dir": "/shared/runs/x", "trainers": [0, 1], "rollouts": [2], '
             '"submitted": 1764000000.5}')


def test_a_stored_ssh_handle_loads_typed_and_is_written_back_as_it_was(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    store.create_job("wl-1", "wl", "name: wl\n", "running")
    store.set_meta("wl-1", HANDLE, OLD_SSH)
    handle = Jobs(store).handle("wl-1")
    assert isinstance(handle, SshHandle) and (handle.job, handle.tag, handle.run_dir) == ("wl-1", "a1b2c3d4e5f6",
                                                                                          "/tmp/runs/wl-1")
    trainer, server = handle.nodes
    assert (trainer.pid, trainer.pgid, trainer.start, trainer.tried) == (4242, 4242, "123456", True)
    assert server.pid is None and server.files.exit_code == "exit_code.rollout0" and trainer.files.log == "node_0.log"
    assert json.loads(handle.to_json()) == json.loads(OLD_SSH)


def test_a_stored_slurm_handle_loads_typed_and_is_written_back_as_it_was():
    handle = Handle.from_json(OLD_SLURM)
    assert isinstance(handle, SlurmHandle) and handle.job == "17" and handle.trainers == [0, 1]
    assert handle.rollouts == [2] and handle.submitted == 1764000000.5
    assert json.loads(handle.to_json()) == json.loads(OLD_SLURM)


# Run-directory files and trainer ranks: launch.runfiles and JobSpec.numbered (the renderer, the plan, the backends,
# the memory loop)

def test_the_plan_the_scripts_and_the_gpu_ranks_agree_on_each_nodes_rank_and_files():
    spec = job(rollout__vllm_mode="server", cluster__nodes=[
        {"host": "r", "role": "rollout", "gpus": [0]}, {"host": "a", "gpus": [0, 1]}, {"host": "b", "gpus": [0, 1]}],
        cluster__master_addr="10.0.0.1")
    plan = make_plan(spec, "j")
    assert [(n.index, n.role, n.rank, n.script) for n in plan.nodes] == [
        (0, "rollout", None, "rollout_0.sh"), (1, "trainer", 0, "node_0.sh"), (2, "trainer", 1, "node_1.sh")]
    assert "export NODE_RANK=1" in plan.bundle.files[plan.nodes[2].script]
    assert [n.log for n in plan.nodes] == ["rollout_0.log", "node_0.log", "node_1.log"]
    assert gpu_roles(spec)[("b", 1)] == ("trainer", 3)  # node rank 1 × 2 processes + local rank 1
    assert 'exit_code.$NODE_RANK' in plan.bundle.files["node_0.sh"]
    assert NodeFiles.of_script("rollout_0.sh") == NodeFiles("rollout", 0)


def test_the_job_id_a_launch_and_an_export_default_to_is_one():
    spec = job()
    assert make_plan(spec).job_id.startswith(f"{spec.name}-") and default_job_id(spec).startswith(f"{spec.name}-")
