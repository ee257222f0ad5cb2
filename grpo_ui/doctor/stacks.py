"""Python stacks of every rank (``py-spy dump``) turned into a phase per rank, and which ranks disagree.

On a suspected hang the watcher dumps (grpo_ui.backends.remote.pyspy) every training process of the job on every node — found by the environment
entry its backend marks the node's processes with (SSH: the launch's GRPO_UI_RUN token; Slurm: SLURM_JOB_ID), a
rank being a process with RANK in its environment — and the doctor shows where each rank is: generation, reward,
weight sync, forward, backward, optimizer, save or data loading, and whether it waits in a collective. Ranks in
different phases, or some waiting while others are not, point at the rank that holds the others.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# Innermost match wins; each phase is recognised by its functions (ms-swift 4.x, TRL, transformers, torch, vLLM).
PHASES = [
    ("vLLM sleep/wake", re.compile(r"^(wake_up|sleep|create_and_map|unmap_and_release)$")),  # in vllm/ files only
    ("save", re.compile(r"^(_save_checkpoint|save_model|_save|save_pretrained|save_file|_save_optimizer_and_"
                        r"scheduler|save_checkpoint)$")),
    ("weight sync", re.compile(r"^(_move_model_to_vllm|_sync_\w+|update_named_param|update_flattened_params|"
                               r"update_adapter_\w+|load_weights|_load_weights|init_communicator|"
                               r"_fast_infer_update_weights|\w*sync_weights\w*)$")),
    ("reward", re.compile(r"^(compute_rewards_per_func|score_completions|_compute_rewards_per_func|"
                          r"_score_completions|_compute_rewards)$")),
    ("generation", re.compile(r"^(generate|_generate_completions|_rollout_samples|infer|_infer|"
                              r"_infer_single_or_batch|_engine_infer|_generate_single|_fast_infer|"
                              r"_server_rollout|_colocate_rollout)$")),
    ("optimizer", re.compile(r"^(step|_optimizer_step|optimizer_step|clip_grad_norm_|_clip_grad_norm|adamw|"
                             r"_single_tensor_adamw|_multi_tensor_adamw)$"), ),
    ("backward", re.compile(r"^(backward|_engine_run_backward|run_backward)$")),
    ("forward", re.compile(r"^(compute_loss|_get_per_token_logps\w*|_compute_loss|forward)$")),
    ("data loading", re.compile(r"^(__next__|_next_data|_get_data|fetch|get_batch_samples|_get_next_batch)$")),
]
OPTIMIZER_FILE = re.compile(r"torch/optim/|/optimizer\.py|deepspeed/.*/(stage|optimizer)")
COLLECTIVE = re.compile(r"^(all_reduce|all_gather\w*|broadcast\w*|barrier|gather\w*|reduce_scatter\w*|"
                        r"all_to_all\w*|wait|_wait|recv|send|monitored_barrier)$")
DIST_FILE = re.compile(r"torch/distributed/|accelerate/utils/operations|vllm/distributed|pynccl")
FRAME = re.compile(r"^\s+(\S+) \((.*?)(?::(\d+))?\)\s*$")
THREAD = re.compile(r'^Thread (\S+) \((\w+)\)(?:: "(.*)")?')
HEADER = re.compile(r"^## (.+)$")


@dataclass
class RankStack:
    """One process's main-thread stack (innermost frame first) and what it says."""

    label: str                      # "node 0 (h0) rank 1" or the header the dump came with
    frames: list[tuple[str, str]]   # (function, file)
    phase: str
    waiting: str | None             # the collective it waits in, if any

    @property
    def summary(self) -> str:
        return self.phase + (f" (waiting in {self.waiting})" if self.waiting else "")


def _in_place(phase: str, fn: str, path: str) -> bool:
    """Names that are too common are only taken in their library's files."""
    if phase == "vLLM sleep/wake":
        return "vllm" in path
    return phase != "optimizer" or fn != "step" or bool(OPTIMIZER_FILE.search(path))


def classify(frames: list[tuple[str, str]]) -> tuple[str, str | None]:
    """(phase, collective waited in) of a stack given innermost first."""
    waiting = next((fn for fn, path in frames if COLLECTIVE.match(fn) and DIST_FILE.search(path)), None)
    for fn, path in frames:
        for phase, rx in PHASES:
            if rx.match(fn) and _in_place(phase, fn, path):
                return phase, waiting
    return ("collective" if waiting else "other"), waiting


def parse_dumps(text: str, default_label: str = "") -> list[RankStack]:
    """``py-spy dump`` outputs, each after an optional ``## LABEL`` line → the main thread's stack of each process
    (the thread named MainThread, else the first one)."""
    out: list[RankStack] = []
    label, threads, current = default_label, [], None

    def flush():
        if threads:
            main = next((t for t in threads if t[0] == "MainThread"), threads[0])
            out.append(RankStack(label or f"process {len(out)}", main[1], *classify(main[1])))

    for line in text.splitlines():
        if m := HEADER.match(line):
            flush()
            label, threads, current = m[1].strip(), [], None
        elif line.startswith("Process ") and threads:
            flush()
            threads, current = [], None
        elif m := THREAD.match(line):
            current = (m[3] or "", [])
            threads.append(current)
        elif current is not None and (m := FRAME.match(line)):
            current[1].append((m[1].rsplit(".", 1)[-1], m[2]))  # "GRPOTrainer._score_completions" → the function
    flush()
    return out


def disagreement(stacks: list[RankStack]) -> str | None:
    """A sentence naming the ranks that are somewhere else than the others; None when they agree."""
    if len(stacks) < 2:
        return None
    by = Counter(s.summary for s in stacks)
    if len(by) == 1:
        return None
    common = by.most_common(1)[0][0]
    odd = [s for s in stacks if s.summary != common]
    waiting = [s for s in stacks if s.waiting]
    if waiting and len(waiting) < len(stacks):
        holders = [s for s in stacks if not s.waiting]
        return (f"{', '.join(s.label for s in waiting)} wait in a collective for "
                f"{', '.join(f'{s.label} ({s.phase})' for s in holders)}")
    return f"{', '.join(f'{s.label} ({s.summary})' for s in odd)} differ from the others ({common})"
