"""`swift rlhf` run in this process, as ms-swift's own `swift/cli/rlhf.py` runs it, with ms-swift's profiling timers
written to a file.

ms-swift times its GRPO phases itself (rlhf_trainers/utils.profiling_context: 'generate', _prepare_inputs,
_generate_and_score_completions, _score_completions, _get_per_token_logps_and_entropies, compute_loss,
_move_model_to_vllm …) but sends the durations only to wandb or swanlab. This wrapper puts a context around that
function before ms-swift's trainers are imported (they import it by name), so every duration also goes to TIMERS as a
JSON line {"name", "parent" (the enclosing timer), "s", "step"}; nothing else of ms-swift changes. At exit it adds
{"name": "peak"} with torch's max_memory_reserved / max_memory_allocated (CUDA) or the process's peak RSS (CPU).

    python bench/gpu/swift_timed.py TIMERS -- ARGS-OF-SWIFT-RLHF…
"""

from __future__ import annotations

import contextlib
import json
import resource
import sys
import time


def _write(out, record: dict) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def _peak() -> dict:
    import torch
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux
    if torch.cuda.is_available():
        return {"name": "peak", "reserved_gib": torch.cuda.max_memory_reserved() / 2 ** 30,
                "allocated_gib": torch.cuda.max_memory_allocated() / 2 ** 30, "rss_gib": rss_gib}
    return {"name": "peak", "reserved_gib": None, "allocated_gib": None, "rss_gib": rss_gib}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] != "--":
        sys.exit("usage: python bench/gpu/swift_timed.py TIMERS -- ARGS-OF-SWIFT-RLHF…")
    out = open(argv[0], "a")
    import swift.rlhf_trainers.utils as ms_utils
    original = ms_utils.profiling_context
    stack: list[str] = []

    @contextlib.contextmanager
    def timed(trainer, name: str):
        parent = stack[-1] if stack else None
        stack.append(name)
        start = time.perf_counter()
        try:
            with original(trainer, name):
                yield
        finally:
            stack.pop()
            state = getattr(trainer, "state", None)
            _write(out, {"name": name, "parent": parent, "s": time.perf_counter() - start,
                         "step": getattr(state, "global_step", None)})

    ms_utils.profiling_context = timed
    sys.argv = ["swift/cli/rlhf.py", *argv[2:]]
    try:
        from swift.cli.utils import try_use_single_device_mode
        try_use_single_device_mode()
        from swift.pipelines import rlhf_main
        rlhf_main()
    finally:
        _write(out, _peak())
        out.close()


if __name__ == "__main__":
    main(sys.argv[1:])
