"""Re-make the captured logs of real ms-swift runs in tests/data/captured/ (what each is: the README there).

Each run is the tiny CPU GRPO job of tests/tiny_job.py under real `swift rlhf` (torchrun, like grpo-ui's node scripts),
its stdout and stderr going to one file as `> log 2>&1` would. Beside each log: ``NAME.arrivals`` (when each piece
of output arrived: "byte offset after the piece, seconds since start" per line) and ``NAME.logging.jsonl`` (the run
directory's logging.jsonl, when one was written). Paths of this machine are replaced by neutral ones.

    GRPO_UI_ASSETS=… python3 tests/capture_logs.py [NAME …]      # as root (disk_full mounts a small tmpfs)
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from tests.tiny_job import ASSETS, CPU_ENV, SWIFT_VENV, paths  # noqa: E402

OUT = Path(__file__).parent / "data" / "captured"
PLUGIN = OUT / "reward_plugin.py"
NEUTRAL = {str(SWIFT_VENV): "/opt/swift-venv", str(ASSETS): "/data/tiny", str(OUT): "/data/plugins"}


def base_args(out: Path, **over) -> list[str]:
    p = paths()
    args = {"rlhf_type": "grpo", "model": p["model"], "model_type": "qwen2", "template": "qwen",
            "dataset": p["dataset"], "num_generations": 2, "per_device_train_batch_size": 2, "max_steps": 3,
            "max_completion_length": 16, "tuner_type": "lora", "lora_rank": 4, "torch_dtype": "float32",
            "logging_steps": 1, "save_steps": 100, "dataloader_num_workers": 0, "report_to": "none",
            "ddp_backend": "gloo", "output_dir": out, "external_plugins": PLUGIN, "reward_funcs": "length_spread",
            **over}
    return [x for k, v in args.items() for x in (f"--{k}", str(v))]


def neutral(text: str) -> str:
    for real, replacement in NEUTRAL.items():
        text = text.replace(real, replacement)
    return re.sub(r"/tmp/capture-[^/]+/out", "/runs/out", text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pids_with(token: str, local_rank: str) -> list[int]:
    """Training processes (torchrun's workers) of this capture with the given LOCAL_RANK."""
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if token.encode() in env and f"LOCAL_RANK={local_rank}".encode() in env:
            found.append(int(d.name))
    return found


def run(name: str, args: list[str], nproc: int = 1, env: dict | None = None, during=None, timeout: float = 600):
    """One capture: start swift, copy its output to NAME.log with arrival times, call ``during(token, log_so_far)``
    on every new piece of output (it may act on the run, e.g. kill a rank)."""
    token = f"CAPTURE_TOKEN={name}-{os.getpid()}"
    env = {**os.environ, **CPU_ENV, "NPROC_PER_NODE": str(nproc), "MASTER_PORT": str(free_port()),
           token.split("=")[0]: token.split("=")[1], **(env or {})}
    proc = subprocess.Popen([str(SWIFT_VENV / "bin/swift"), "rlhf", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    start, data, arrivals = time.time(), b"", []
    killer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    killer.start()
    while chunk := os.read(proc.stdout.fileno(), 1 << 16):
        data += chunk
        arrivals.append((len(data), round(time.time() - start, 3)))
        if during:
            during(token, data)
    proc.wait()
    killer.cancel()
    text = neutral(data.decode("utf-8", "replace"))
    (OUT / f"{name}.log").write_text(text)
    (OUT / f"{name}.arrivals").write_text("".join(f"{o} {t}\n" for o, t in arrivals))
    print(f"{name}: exit {proc.returncode}, {len(text.splitlines())} lines, {arrivals[-1][1]:.0f} s")
    return proc.returncode, text


def keep_logging_jsonl(name: str, out: Path) -> None:
    found = sorted(out.glob("*/logging.jsonl"))
    if found:
        (OUT / f"{name}.logging.jsonl").write_text(neutral(found[-1].read_text()))


def kill_rank_after_first_step(sig: int):
    """A ``during`` hook: once rank 0 has printed its first metric line, send ``sig`` to local rank 1."""
    sent = []

    def during(token, data):
        if not sent and b"{'loss'" in data:
            for pid in pids_with(token, "1"):
                os.kill(pid, sig)
                sent.append(pid)
    return during


def py_spy() -> str:
    return shutil.which("py-spy") or str(Path(__file__).parent.parent / ".venv/bin/py-spy")


def dump_stacks(name: str, token: str, ranks: list[str]) -> None:
    """``py-spy dump`` of each local rank's training process, appended to NAME.pyspy under a '## local rank' line."""
    with open(OUT / f"{name}.pyspy", "a") as f:
        for rank in ranks:
            for pid in pids_with(token, rank):
                dump = subprocess.run([py_spy(), "dump", "--nonblocking", "--pid", str(pid)], capture_output=True,
                                      text=True)
                f.write(f"## local rank {rank}\n" + neutral(dump.stdout + dump.stderr))


def stacks_while_slow(name: str):
    """A ``during`` hook: after the first metric line, three py-spy dumps of rank 0, 1.5 s apart (in a thread)."""
    started = []

    def dumps(token):
        for _ in range(3):
            time.sleep(1.5)
            dump_stacks(name, token, ["0"])

    def during(token, data):
        if not started and b"{'loss'" in data:
            started.append(threading.Thread(target=dumps, args=(token,), daemon=True))
            started[0].start()
    return during


def stop_rank1_then_dump(name: str):
    """A ``during`` hook: after the first metric line, SIGSTOP local rank 1 (a rank that stops answering), dump both
    ranks' stacks 20 s later, then SIGKILL every training process of the run."""
    done = []

    def hang(token):
        for pid in pids_with(token, "1"):
            os.kill(pid, signal.SIGSTOP)
        time.sleep(20)
        dump_stacks(name, token, ["0", "1"])
        for pid in pids_with(token, "0") + pids_with(token, "1"):
            os.kill(pid, signal.SIGKILL)

    def during(token, data):
        if not done and b"{'loss'" in data:
            done.append(threading.Thread(target=hang, args=(token,), daemon=True))
            done[0].start()
    return during


class RolloutDouble(http.server.BaseHTTPRequestHandler):
    """Answers the HTTP endpoints ms-swift's VLLMClient calls before weight sync (health, world size, communicator);
    a stand-in for `swift rollout` with vLLM, which needs a GPU. It never opens the group port."""

    def _answer(self):
        body = json.dumps({"status": "ok", "world_size": 1, "engine_type": "vllm"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


def server_args(out: Path, port: int) -> list[str]:
    return base_args(out, use_vllm="true", vllm_mode="server", vllm_server_host="127.0.0.1",
                     vllm_server_port=port, vllm_server_group_port=free_port(), vllm_server_timeout=6)


STANDIN = {"PYTHONPATH": str(OUT / "vllm_standin"), "STANDIN_STORE_TIMEOUT_S": "15"}


def capture(name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="capture-") as tmp:
        out = Path(tmp) / "out"
        if name == "healthy_logging5":
            run(name, base_args(out, max_steps=10, logging_steps=5, save_steps=5, stop_words="a"))
        elif name == "slow_reward":
            run(name, base_args(out, max_steps=5, reward_funcs="slow_length_spread", stop_words="a"),
                env={"SLOW_REWARD_S": "4"})
        elif name == "reward_slowing":
            (OUT / f"{name}.pyspy").unlink(missing_ok=True)
            run(name, base_args(out, max_steps=8, reward_funcs="slowing_length_spread"),
                during=stacks_while_slow(name))
        elif name == "lr_blowup":
            run(name, base_args(out, max_steps=5, learning_rate="1e30"))
        elif name == "rank1_stopped":
            (OUT / f"{name}.pyspy").unlink(missing_ok=True)
            run(name, base_args(out, max_steps=200), nproc=2, during=stop_rank1_then_dump(name))
        elif name == "rank1_sigkill":
            run(name, base_args(out, max_steps=200), nproc=2, during=kill_rank_after_first_step(signal.SIGKILL))
        elif name == "rank1_sigabrt":
            run(name, base_args(out, max_steps=200), nproc=2, during=kill_rank_after_first_step(signal.SIGABRT))
        elif name in ("reward_none", "reward_nan", "reward_inf", "reward_raises"):
            func = {"reward_none": "returns_none", "reward_nan": "returns_nan", "reward_inf": "returns_inf",
                    "reward_raises": "raises"}[name]
            run(name, base_args(out, reward_funcs=func))
        elif name == "server_vllm_missing":
            run(name, server_args(out, free_port()))
        elif name == "server_unreachable":
            run(name, server_args(out, free_port()), env=STANDIN)  # nothing listens on the HTTP port
        elif name == "server_group_port_closed":
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RolloutDouble)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            try:
                run(name, server_args(out, server.server_address[1]), env=STANDIN)
            finally:
                server.shutdown()
        elif name == "disk_full":
            out.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(out)], check=True)
            try:
                run(name, base_args(out, max_steps=2, save_steps=1))
                keep_logging_jsonl(name, out)
                listing = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
                (OUT / f"{name}.listing").write_text("".join(f"{p}\n" for p in listing))
            finally:
                subprocess.run(["umount", str(out)], check=False)
            return
        else:
            sys.exit(f"unknown capture {name!r}")
        keep_logging_jsonl(name, out)
        shutil.rmtree(out, ignore_errors=True)


NAMES = ["healthy_logging5", "slow_reward", "reward_slowing", "rank1_stopped", "rank1_sigkill", "rank1_sigabrt",
         "reward_none", "reward_nan", "reward_raises", "reward_inf", "lr_blowup", "server_vllm_missing",
         "server_unreachable", "server_group_port_closed", "disk_full"]

if __name__ == "__main__":
    for n in sys.argv[1:] or NAMES:
        capture(n)
