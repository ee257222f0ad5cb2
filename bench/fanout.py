"""Launch fan-out: start a trivial job on 1 and on 16 network-namespace hosts through grpo-ui's jobs service and SSH
backend (plan, connect, one remote shell per node that unpacks the script and starts it in its own session, a 0.3 s
liveness poll, record), and start the same trivial command with pdsh over ssh in the same run. Also measures the
floor of any SSH fan-out here: one no-op remote command on 1 and 16 open connections (sshd's session plus the login
shell, which sources the user's ~/.bashrc). Targets: 16 hosts ≤ 1.5 × pdsh, and ≤ 2 × our 1-host
time. Needs root (namespaces), like the test suite."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from grpo_ui.backends.remote.runner import parallel  # noqa: E402
from grpo_ui.backends.remote.ssh import Pool  # noqa: E402
from grpo_ui.jobs.service import Jobs  # noqa: E402
from grpo_ui.jobs.store import Store  # noqa: E402
from grpo_ui.spec.yaml_io import validate_spec
from tests.hosts import HostNet  # noqa: E402

WORKLOAD = "#!/bin/bash\nexec sleep 3\n"
ROUNDS = 5


def spec(hosts, env_dir, root):
    return validate_spec({
        "name": "fanout", "train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": ["d"], "reward_funcs": ["format"],
                                    "num_generations": 2, "per_device_train_batch_size": 2},
        "rollout": {"use_vllm": False, "vllm_mode": None},
        "cluster": {"master_addr": hosts[0].addr, "run_root": str(root / "runs"), "nodes": [
            {"host": h.name, "gpus": [0], "python_env": str(env_dir)} for h in hosts]}})


def ours(hosts, env_dir, root, job, pool=None):
    """Seconds for one launch; with ``pool`` its connections are reused (as after preflight in the app)."""
    jobs = Jobs(Store(root / f"{job}.db"), pool or Pool())
    start = time.perf_counter()
    jobs.launch(jobs.plan(spec(hosts, env_dir, root), job))
    took = time.perf_counter() - start
    if pool is None:
        jobs.pool.close()
    return took


def noop(hosts, pool):
    """Seconds for `true` on every host at once over connections that are already open."""
    conns = [pool.get(h.name) for h in hosts]
    start = time.perf_counter()
    parallel(lambda c: c.run("true"), conns)
    return time.perf_counter() - start


def pdsh(hosts, net):
    env = {**os.environ, "PDSH_RCMD_TYPE": "ssh",
           "PDSH_SSH_ARGS_APPEND": f"-F {net.ssh_config} -o UserKnownHostsFile={net.known_hosts} -o BatchMode=yes"}
    cmd = "mkdir -p /tmp/pdsh-fanout && cd /tmp/pdsh-fanout && (setsid nohup sleep 3 > log 2>&1 < /dev/null &)"
    start = time.perf_counter()
    subprocess.run(["pdsh", "-f", "32", "-w", ",".join(h.name for h in hosts), cmd], env=env, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def one_round(k, hosts, env_dir, root, net, warm_pool) -> dict[str, float]:
    """Every measurement once, in this order (a dict keeps it)."""
    return {"one": ours(hosts[:1], env_dir, root, f"one-{k}"), "sixteen": ours(hosts, env_dir, root, f"sixteen-{k}"),
            "warm": ours(hosts, env_dir, root, f"warm-{k}", warm_pool), "floor1": noop(hosts[:1], warm_pool),
            "floor16": noop(hosts, warm_pool), "p1": pdsh(hosts[:1], net), "p16": pdsh(hosts, net)}


def main():
    if os.geteuid() != 0:
        sys.exit("bench/fanout.py needs root to build namespace hosts")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        net = HostNet(root, f"b{os.getpid() % 10000}", 180 + os.getpid() % 15)
        os.environ["GRPO_UI_SSH_CONFIG"], os.environ["GRPO_UI_KNOWN_HOSTS"] = str(net.ssh_config), str(net.known_hosts)
        try:
            hosts = net.add(16)
            env_dir = root / "env"
            (env_dir / "bin").mkdir(parents=True)
            (env_dir / "bin" / "swift").write_text(WORKLOAD)
            (env_dir / "bin" / "swift").chmod(0o755)
            warm_pool = Pool()
            ours(hosts, env_dir, root, "warmup", warm_pool)
            times: dict[str, list[float]] = {}
            for k in range(ROUNDS):  # interleaved, so that every measurement sees the same load from other work
                for name, took in one_round(k, hosts, env_dir, root, net, warm_pool).items():
                    times.setdefault(name, []).append(took)
            warm_pool.close()
            one, sixteen, warm, floor1, floor16, p1, p16 = (min(times[n]) for n in (
                "one", "sixteen", "warm", "floor1", "floor16", "p1", "p16"))
        finally:
            net.teardown()
    print(f"machine: {os.cpu_count()} cores shared with other work (load average {os.getloadavg()[0]:.1f}); all 16 "
          f"hosts and their sshd run on these cores; best of {ROUNDS} interleaved rounds")
    print(f"floor, `true` over open SSH connections: 1 host {floor1:.2f} s, 16 hosts {floor16:.2f} s "
          f"({floor16 / floor1:.1f} ×: remote CPU, not the network, bounds any fan-out here)")
    print(f"grpo-ui launch: 1 host {one:.2f} s, 16 hosts {sixteen:.2f} s ({sixteen / one:.2f} × 1 host; target ≤ 2)")
    print(f"grpo-ui launch on 16 hosts with connections already open (after preflight): {warm:.2f} s")
    print(f"pdsh (ssh) start: 1 host {p1:.2f} s, 16 hosts {p16:.2f} s")
    print(f"16 hosts, grpo-ui / pdsh: {sixteen / p16:.2f} × (target ≤ 1.5; grpo-ui also renders, sends the script, "
          "waits 0.3 s for the script to stay alive and records pid, process group and start time per node)")
    print(f"16 hosts, grpo-ui with open connections / pdsh: {warm / p16:.2f} ×")


if __name__ == "__main__":
    main()
