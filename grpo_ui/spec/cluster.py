"""The machines of a job (ClusterSpec) and each node: where to reach it, its GPUs and what it does."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grpo_ui.knowledge.catalog import gpus
from grpo_ui.spec.estimate import DEFAULT_INTERNODE_GBS
from grpo_ui.spec.fields import setting
from grpo_ui.spec.names import (
    RESERVED_ENV,
    check_env_names,
    check_host,
    check_jobs_address,
    check_no_secrets,
    is_loopback,
)


def _gpu_names() -> list[str]:
    """The catalogue's GPUs, by the names nvidia-smi prints."""
    return sorted(gpus())


class Node(BaseModel):
    """One machine: where to reach it, which GPUs to use, and what it does."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    host: str = setting(..., "Hostname, IP or ~/.ssh/config alias; 'localhost' runs without SSH.")
    user: str | None = setting(None, "SSH user (default: ssh config / current user).", applies="ssh")
    port: int | None = setting(None, "SSH port (default: ssh config / 22).", applies="ssh", ge=1, le=65535)
    identity_file: str | None = setting(None, "SSH private key file (default: ssh config / agent).", applies="ssh")
    address: str | None = setting(None, "Address other nodes use to reach it (default: host).", applies="ssh")
    gpus: list[int] = setting([0], "CUDA device ids to use, e.g. 0,1,2,3.", widget="csv")
    gpu_model: str | None = setting(None, "GPU model as nvidia-smi names it (from the catalogue or filled in by "
                                    "preflight).", options=_gpu_names)
    gpu_memory_gib: float | None = setting(None, "Memory per GPU in GiB, for a GPU the catalogue does not know (the "
                                           "memory estimate uses it over gpu_model's).", gt=0, le=4096)
    python_env: str | None = setting(None, "venv or conda env directory to activate.")
    role: Literal["trainer", "rollout"] = setting("trainer", "trainer runs swift rlhf; rollout runs swift rollout.")
    workdir: str | None = setting(None, "Directory to cd into (default: the cluster workdir).")
    env: dict[str, str] = setting({}, "Extra environment for this node only: NAME=value items.")

    @field_validator("host")
    @classmethod
    def _host_ok(cls, v: str) -> str:
        return check_host(v.strip(), alias=True)

    @field_validator("address")
    @classmethod
    def _address_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_host(v.strip())

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        return check_no_secrets(check_env_names(v, tuple(k for k in RESERVED_ENV if k != "CUDA_VISIBLE_DEVICES")))

    @field_validator("gpus")
    @classmethod
    def _gpus_ok(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("give at least one GPU id")
        if len(set(v)) != len(v) or min(v) < 0:
            raise ValueError(f"GPU ids must be distinct and ≥ 0, got {v}")
        return v

    @property
    def routable(self) -> str:
        """The address other nodes use."""
        return self.address or self.host

    @property
    def is_local(self) -> bool:
        return is_loopback(self.host)


class ClusterSpec(BaseModel):
    """The machines of the job and how they find each other."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    nodes: list[Node] = Field(default_factory=lambda: [Node(host="localhost")], description="The machines, one "
                              "row each (fields: the node settings).")
    master_addr: str | None = setting(None, "Rendezvous address (default: node 0's address).", applies="ssh")
    master_port: int | None = setting(
        None, "Rendezvous port on the master (MASTER_PORT). Unset: 29500 over SSH; on Slurm 20000 + the Slurm job id "
        "mod 20000, so jobs that share a node do not collide.", ge=1, le=65535)
    workdir: str | None = setting(None, "Directory every node cd's into (default: the job's run dir): where the "
                                  "relative paths of the job's files start.")
    external_rollout: bool = setting(False, "The rollout servers rollout.vllm_server_host names are started outside "
                                     "this job (by you, before launching): the trainers wait for them, preflight "
                                     "checks that each answers /health/ (over SSH).")
    run_root: str = setting("~/.grpo-ui/runs", "Where each node keeps its run directories.")
    backend: Literal["ssh", "slurm", "ray"] = setting(
        "ssh", "ssh: grpo-ui starts every node over SSH. slurm: one sbatch job; Slurm picks the machines (the trainer "
        "nodes then say how many nodes with how many GPUs, their hosts are unused). ray: one Ray job runs each node's "
        "script on its node (or, in ms-swift's Ray mode, its driver, Ray placing the roles on the nodes), on a Ray "
        "cluster grpo-ui starts on the nodes over SSH or on the one ray_address names.")
    internode_gbs: float | None = setting(
        None, "Network bandwidth between two nodes in GB/s (one direction, all of a node's NICs together), for the "
        f"step-time prediction. Unset: {DEFAULT_INTERNODE_GBS:g} GB/s (one 200 Gb/s port); 8 × 400 Gb/s InfiniBand is "
        "400.", gt=0, le=10000)
    login: str = setting("localhost", "Where sbatch, squeue and scancel run: a hostname or ~/.ssh/config alias "
                         "reached over SSH, or localhost when the app runs on a login node. run_root must be on a "
                         "file system the compute nodes share.", applies="slurm", pattern=r"^[A-Za-z0-9_.-]+$")

    ray_address: str | None = setting(
        None, "The Jobs API address of a running Ray cluster to use (http://HEAD:8265, what KubeRay exposes); its "
        "nodes are the job's nodes, reached over SSH for their files. Unset: grpo-ui starts Ray on the job's nodes "
        "(node 0 the head) and stops it when the job ends.", applies="ray")
    ray_port: int = setting(6379, "The port of the Ray cluster grpo-ui starts (its GCS, on node 0).", applies="ray",
                            ge=1, le=65535)
    ray_dashboard_port: int = setting(8265, "The port of the dashboard and Jobs API of the Ray cluster grpo-ui starts, "
                                      "bound to node 0's address only.", applies="ray", ge=1, le=65535)
    ray_keep: bool = setting(False, "Keep the Ray cluster grpo-ui started running once the job ends (point "
                             "ray_address at it to run the next job there).", applies="ray")

    @field_validator("ray_address")
    @classmethod
    def _ray_address_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_jobs_address(v.strip())

    @field_validator("master_addr")
    @classmethod
    def _master_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_host(v.strip())
