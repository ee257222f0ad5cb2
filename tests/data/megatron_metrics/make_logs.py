"""Writes what megatron rlhf's last global rank prints and logs in a 12-iteration GRPO run, in ms-swift 4.6's own
formats from its own code, run in the ms-swift 4.6 venv (no GPU: the values are invented, the formats are not):

    ~/.cache/grpo-ui/swift-venv/bin/python make_logs.py OUT_DIR > OUT_DIR/last_node.log 2>&1

- ``last_node.log`` (the redirected output): the last node's stdout and stderr: ms-swift's logger line ``logging_path: …`` (swift's
  get_logger, as PrintCallback.on_train_begin logs it) and, at iteration 1 and every logging_steps, the dict
  PrintCallback.on_log prints with tqdm.write(str(logs));
- ``OUT_DIR/run/logging.jsonl``: the same dicts appended by ms-swift's JsonlWriter(write_on_rank='last') as this
  process, made the last of 16 ranks (RANK=15, WORLD_SIZE=16). On a node the logger line comes from its local rank 0
  and the dicts from its last local rank, both into the node's log; one process stands for both here (LOCAL_RANK=0,
  which swift's logger prints on).

The dict is assembled as swift/megatron/callbacks/print.py's on_log does (its keys in its order, floats rounded to 8
places, format_time from swift.utils); when it is logged follows swift/megatron/callbacks/default_flow.py (iteration
1, then every logging_steps). The clock is simulated instead of slept: a first iteration of WARMUP_S seconds, then
STEP_S seconds per iteration.
"""

import os
import sys

os.environ.update(RANK="15", WORLD_SIZE="16", LOCAL_RANK="0", LOCAL_WORLD_SIZE="8")

from swift.utils import JsonlWriter, format_time, get_logger  # noqa: E402

TRAIN_ITERS, LOGGING_STEPS, WARMUP_S, STEP_S = 12, 2, 140.0, 80.0


def main(out: str) -> None:
    run = os.path.join(out, "run")
    os.makedirs(run, exist_ok=True)
    logging_path = os.path.join(run, "logging.jsonl")
    get_logger().info(f"logging_path: {logging_path}")
    writer = JsonlWriter(logging_path, enable_async=False, write_on_rank="last")
    for iteration in range(1, TRAIN_ITERS + 1):
        if not (iteration == 1 or iteration % LOGGING_STEPS == 0):
            continue
        elapsed = WARMUP_S + STEP_S * (iteration - 1)
        logs = {"loss": 0.0123 / iteration, "kl": 0.0004 * iteration, "completions/mean_length": 900.0 + 10 * iteration,
                "completions/max_length": 2048.0, "completions/min_length": 120.0, "reward": 0.3 + 0.02 * iteration,
                "reward_std": 0.41, "frac_reward_zero_std": 0.125, "grad_norm": 0.21, "learning_rate": 1e-06}
        logs["iteration"] = f"{iteration}/{TRAIN_ITERS}"
        logs["elapsed_time"] = format_time(elapsed)
        train_speed = elapsed / iteration
        logs["remaining_time"] = format_time((TRAIN_ITERS - iteration) * train_speed)
        logs["memory(GiB)"] = round(61.234567, 2)
        logs["train_speed(s/it)"] = round(train_speed, 6)
        logs = {k: round(v, 8) if isinstance(v, float) else v for k, v in logs.items()}
        writer.append(logs)
        print(str(logs), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
