"""The files of a job's run directory, by name: each node's script, log, exit code, pid and secrets file, the
Slurm job's own (its batch script, the hosts Slurm allocated) and the Ray job's (its driver, plan and log; in ms-swift's
Ray mode the driver's script, the Ray config and the workers' secrets file). The renderer
writes them and the templates name them (with the node's number as a shell expression: "$NODE_RANK", Slurm's "%n");
the plan, the backends and the watcher read them. All of them ask here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SBATCH = "job.sbatch"               # the Slurm batch script
HOSTS = "hosts"                     # Slurm: line k + 1 names the node of NODE_RANK k
ROLLOUT_HOSTS = "rollout_hosts"     # Slurm: line k + 1 names the node of rollout server k
SBATCH_OUTPUT = "slurm-%j.out"      # the batch script's own output (%j: the Slurm job id)
RAY_DRIVER = "ray_driver.py"        # Ray: the job's driver (grpo_ui/backends/ray_driver.py), on node 0
RAY_PLAN = "ray_plan.json"          # Ray: what the driver runs where
RAY_DRIVER_LOG = "ray_driver.log"   # Ray: the driver's log as the Jobs API served it, kept when grpo-ui ends the cluster
RAY_SCRIPT = "ray_job.sh"           # ms-swift's Ray mode: the driver's script (megatron rlhf --use_ray true), on node 0
RAY_CONFIG = "ray_config.yaml"      # ms-swift's Ray mode: the Ray config it reads, on every node
RAY_WORKER_SECRETS = "ray_workers.secrets.env"  # ms-swift's Ray mode: what Ray's workers on the node read at start


def secrets_file(script: str) -> str:
    """The 0600 file a script reads its secret values from and then deletes, next to it in the run directory:
    node_<NODE_RANK>, rollout_<ROLLOUT_INDEX> or job (job.sbatch) .secrets.env."""
    return script.rsplit(".", 1)[0] + ".secrets.env"


@dataclass(frozen=True)
class NodeFiles:
    """The files of one node: a trainer by its NODE_RANK, a rollout server by its number among the rollout nodes;
    in a script the number may be a shell expression ("$NODE_RANK", "${ROLLOUT_INDEX}", Slurm's "%n")."""

    role: Literal["trainer", "rollout"]
    number: int | str

    @classmethod
    def of_script(cls, script: str) -> NodeFiles:
        """The files of the node that runs ``script`` (node_<rank>.sh or rollout_<k>.sh)."""
        role, _, number = script.removesuffix(".sh").rpartition("_")
        return cls("trainer" if role == "node" else "rollout", int(number))

    @property
    def stem(self) -> str:
        return f"{'node' if self.role == 'trainer' else 'rollout'}_{self.number}"

    @property
    def script(self) -> str:
        return f"{self.stem}.sh"

    @property
    def log(self) -> str:
        """What the script and swift print (the SSH launcher redirects into it; on Slurm, srun's --output)."""
        return f"{self.stem}.log"

    @property
    def pid(self) -> str:
        """The SSH launcher's record of the script's process."""
        return f"{self.stem}.pid"

    @property
    def secrets(self) -> str:
        return secrets_file(self.script)

    @property
    def exit_code(self) -> str:
        """Where the script writes swift's exit code once it ends."""
        return f"exit_code.{self.number}" if self.role == "trainer" else f"exit_code.rollout{self.number}"
