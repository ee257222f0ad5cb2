"""Launch fan-out: start a trivial job on 1, 8, 16 and 64 network-namespace hosts through grpo-ui's jobs service and
SSH backend (plan, connect, one remote shell per node that unpacks the script and starts it in its own session, a
0.3 s liveness poll, record), and start the same trivial command with pdsh over ssh on the same hosts in the same run.
Also measures the floor of any SSH fan-out here: one no-op remote command on 1 and 64 open connections (sshd's session
plus the login shell, which sources the user's ~/.bashrc). Targets: 64 hosts ≤ 1.2 × pdsh (issue 32; 16 hosts ≤ 1.5 ×
before it). Needs root (namespaces), like the test suite.

Where the time goes (issue 32, measured before deciding what to change): at 64 hosts the launch spent under 1 s in
connecting (paramiko, 64 threads) and the rest waiting for the remote shells, while this process used 0.7 s of CPU in
all; the remote side (64 sshd sessions, bash, tar, the node scripts starting) runs on the same shared cores as every
namespace host, and pdsh pays the same. So the launch path is left as it is and measured at 64 hosts.
"""

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
ROUNDS = 3


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


SIZES = (8, 16, 64)


def one_round(k, hosts, env_dir, root, net, warm_pool) -> dict[str, float]:
    """Every measurement once, in this order (a dict keeps it)."""
    out = {"one": ours(hosts[:1], env_dir, root, f"one-{k}"), "p1": pdsh(hosts[:1], net)}
    for n in SIZES:
        out[f"ours{n}"] = ours(hosts[:n], env_dir, root, f"n{n}-{k}")
        out[f"pdsh{n}"] = pdsh(hosts[:n], net)
    out["warm"] = ours(hosts, env_dir, root, f"warm-{k}", warm_pool)
    out["floor1"], out["floor"] = noop(hosts[:1], warm_pool), noop(hosts, warm_pool)
    return out


def main():
    if os.geteuid() != 0:
        sys.exit("bench/fanout.py needs root to build namespace hosts")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        net = HostNet(root, f"b{os.getpid() % 10000}", 180 + os.getpid() % 15)
        os.environ["GRPO_UI_SSH_CONFIG"], os.environ["GRPO_UI_KNOWN_HOSTS"] = str(net.ssh_config), str(net.known_hosts)
        try:
            hosts = net.add(max(SIZES))
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
            best = {name: min(values) for name, values in times.items()}
        finally:
            net.teardown()
    n = max(SIZES)
    print(f"machine: {os.cpu_count()} cores shared with other work (load average {os.getloadavg()[0]:.1f}); all {n} "
          f"hosts and their sshd run on these cores; best of {ROUNDS} interleaved rounds")
    print(f"floor, `true` over open SSH connections: 1 host {best['floor1']:.2f} s, {n} hosts {best['floor']:.2f} s "
          f"({best['floor'] / best['floor1']:.1f} ×: remote CPU, not the network, bounds any fan-out here)")
    print(f"1 host: grpo-ui launch {best['one']:.2f} s, pdsh (ssh) start {best['p1']:.2f} s")
    for size in SIZES:
        ratio = best[f"ours{size}"] / best[f"pdsh{size}"]
        print(f"{size} hosts: grpo-ui launch {best[f'ours{size}']:.2f} s, pdsh {best[f'pdsh{size}']:.2f} s, "
              f"grpo-ui / pdsh {ratio:.2f} ×" + (" (target ≤ 1.2; grpo-ui also renders, sends the script, waits 0.3 s "
                                                 "for it to stay alive and records pid, process group and start time "
                                                 "per node)" if size == n else ""))
    print(f"{n} hosts with connections already open (after preflight): {best['warm']:.2f} s, "
          f"{best['warm'] / best[f'pdsh{n}']:.2f} × pdsh")


if __name__ == "__main__":
    main()
