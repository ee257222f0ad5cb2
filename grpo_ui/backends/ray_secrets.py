"""The job's secret values for ms-swift's Ray workers: runs on the Ray cluster, in every worker process of the job
(Ray's ``worker_process_setup_hook``), not in the app; it imports only the standard library.

ms-swift's Ray mode starts its trainers and vLLM replicas as Ray actors, each with a runtime environment of its own
(swift/ray/megatron/worker_group.py, rollout/replica.py: rank, devices, master address) merged by Ray over the job's.
They do not inherit the driver's environment, where the driver's script put the secrets; and Ray shows every runtime
environment on its dashboard, so the values cannot go there. Instead the Ray backend writes them, as the SSH backend
does, to a 0600 file in the job's run directory on every node, names that file (a path, no value) in the job's
environment as GRPO_UI_SECRETS_FILE, and ships this module as a Ray package whose ``load`` Ray runs first in each
worker process: it puts the file's values into the process's environment. The file stays for the job's life (Ray
starts workers throughout it); the backend removes it when the job ends.
"""

from __future__ import annotations

import os
import shlex
import socket

FILE_VARIABLE = "GRPO_UI_SECRETS_FILE"


def load() -> None:
    """Each NAME='value' line of the node's secrets file (shell-quoted, as the backend writes it) into os.environ.
    A node without the file stops the worker with a message that names the file and the node, never a value."""
    path = os.path.expanduser(os.environ[FILE_VARIABLE])
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise RuntimeError(f"grpo-ui: the job's secrets file {path} cannot be read on {socket.gethostname()} "
                           f"({e.strerror}): Ray placed a worker of the job on a node grpo-ui sent no secrets to, or "
                           "the job has ended") from None
    for word in shlex.split(text):
        name, _, value = word.partition("=")
        os.environ[name] = value
