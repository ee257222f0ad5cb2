"""The network a job needs, checked from its nodes: the rendezvous port on the master, each rollout server's HTTP
port and weight-sync group port, reachable from the nodes that use them and free where they will be bound."""

from __future__ import annotations

from grpo_ui.backends.preflight.facts import activate
from grpo_ui.backends.remote.runner import Runner, parallel
from grpo_ui.core import shell
from grpo_ui.core.findings import Finding, finding
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.resolve import Resolved

LISTEN = ("import socket, sys, time\nsocks = []\nfor p in sys.argv[1:]:\n    s = socket.socket()\n"
          "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n    s.bind(('0.0.0.0', int(p)))\n"
          "    s.listen(16)\n    socks.append(s)\ntime.sleep(15)")


def taken(runner: Runner, ports: list[int], host: str = "127.0.0.1") -> list[int]:
    """The ports something already listens on (on the node itself, at ``host``: a listener bound to one address
    answers there only)."""
    cmd = f"for p in {shell.join(ports)}; do (exec 3<>/dev/tcp/{shell.quote(host)}/$p) 2>/dev/null && echo $p; done"
    return [int(p) for p in runner.run(cmd, timeout=15).out.split()]


def _unreachable(runner: Runner, endpoints: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (host, port)s this node cannot open a TCP connection to within 5 s (--norc: see backends.ssh)."""
    hps = shell.join(f"{h}:{p}" for h, p in endpoints)
    cmd = (f'for hp in {hps}; do timeout 5 bash --norc -c "exec 3<>/dev/tcp/${{hp%:*}}/${{hp##*:}}" 2>/dev/null '
           '|| echo "$hp"; done')
    down = set(runner.run(cmd, timeout=5 * len(endpoints) + 15).out.split())
    return [(h, p) for h, p in endpoints if f"{h}:{p}" in down]


def _listen(runner: Runner, node: Node, ports: list[int]) -> str:
    """Listen on the ports on that node for at most 15 s (nothing of the job runs yet); returns the listener's pid
    once the last port accepts connections."""
    cmd = (activate(node.python_env) + f"nohup python3 -c {shell.quote(LISTEN)} {shell.join(ports)} "
           f"> /dev/null 2>&1 & pid=$!; for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{int(ports[-1])}) "
           "2>/dev/null && break; sleep 0.05; done; echo $pid")
    return runner.run(cmd, timeout=20).out.strip()


def _master_checks(eff: Resolved, runners: dict[int, Runner], trainers: list[int]) -> list[Finding]:
    """MASTER_PORT free on the master and reachable from every other trainer node."""
    spec = eff.spec
    master, port, addr = trainers[0], eff.master_port, eff.master_addr
    if taken(runners[master], [port]):
        return [finding("PREFLIGHT-PORT-TAKEN", "error", "cluster.master_port",
                        f"MASTER_PORT {port} is already in use on {spec.cluster.nodes[master].host}.",
                        "Pick another master_port, or stop what listens there.")]
    if len(trainers) < 2:
        return []
    pid = _listen(runners[master], spec.cluster.nodes[master], [port])
    try:
        results = parallel(lambda i: _unreachable(runners[i], [(addr, port)]), trainers[1:])
    finally:
        runners[master].run(shell.join(["kill", pid]) + " 2>/dev/null", timeout=10)
    return [finding("PREFLIGHT-MASTER-UNREACHABLE", "error", f"cluster.nodes[{i}].host",
                    f"{spec.cluster.nodes[i].host} cannot reach MASTER_ADDR {addr}:{port}: the rendezvous would hang.",
                    "Open the port between the nodes (firewall, security group) or set master_addr to an address "
                    "the workers can reach.") for i, down in results if down]


def _rollout_checks(eff: Resolved, runners: dict[int, Runner], rank0: int) -> list[Finding]:
    """Server mode: every rollout server's HTTP port and NCCL group port free on its node and reachable from trainer
    rank 0 (through a short-lived listener); servers outside the cluster are only probed."""
    spec = eff.spec
    out, nodes = [], spec.cluster.nodes
    own = [] if spec.rollout.vllm_server_host else [i for i, n in enumerate(nodes) if n.role == "rollout"]
    r0, http_field = nodes[rank0].host, "rollout.vllm_server_port" if spec.rollout.vllm_server_host else "server.port"
    for k, ((host, http), group) in enumerate(zip(eff.server_endpoints, eff.group_ports, strict=True)):
        ports = {http: ("HTTP port", http_field), group: ("group port", "rollout.vllm_server_group_port")}
        index = own[k] if k < len(own) else None
        if index is None and spec.cluster.external_rollout:
            continue  # started outside the job: rank 0's probe asks its /health/ (facts.outside_servers)
        if index is None or index not in runners:
            for h, p in _unreachable(runners[rank0], [(host, p) for p in ports]):
                out.append(finding("PREFLIGHT-ROLLOUT-UNREACHABLE", "warning", ports[p][1],
                                   f"Trainer rank 0 ({r0}) cannot reach rollout server {h}:{p} ({ports[p][0]}); fine "
                                   "if that server is not started yet.",
                                   f"Check that {h} accepts connections on {p} from {r0}."))
            continue
        busy = taken(runners[index], list(ports))
        for p in busy:
            out.append(finding("PREFLIGHT-PORT-TAKEN", "error", ports[p][1],
                               f"{ports[p][0].capitalize()} {p} is already in use on rollout node {nodes[index].host} "
                               "(an old server still running?).", "Stop what listens there, or pick another port."))
        free = [p for p in ports if p not in busy]
        if not free:
            continue
        pid = _listen(runners[index], nodes[index], free)
        try:
            down = _unreachable(runners[rank0], [(host, p) for p in free])
        finally:
            runners[index].run(shell.join(["kill", pid]) + " 2>/dev/null", timeout=10)
        for h, p in down:
            out.append(finding("PREFLIGHT-ROLLOUT-UNREACHABLE", "error", ports[p][1],
                               f"Trainer rank 0 ({r0}) cannot reach rollout node {nodes[index].host} at {h}:{p} "
                               f"({ports[p][0]}) although a test listener was open there: the trainer would time out.",
                               f"Open port {p} from {r0} to {h} (firewall, security group), or fix the node's "
                               "address."))
    return out


def _sync_port_checks(eff: Resolved, runners: dict[int, Runner], trainers: list[int]) -> list[Finding]:
    """Server mode: each rollout node's weight-sync group port reachable from every trainer node besides rank 0
    (rank 0, which opens the group, is checked with the HTTP port). ms-swift 4.x syncs weights from global rank 0
    only, so this is a warning: it matters once another node becomes node 0."""
    spec = eff.spec
    out, nodes = [], spec.cluster.nodes
    own = [] if spec.rollout.vllm_server_host else [i for i, n in enumerate(nodes) if n.role == "rollout"]
    for (host, _), port, index in zip(eff.server_endpoints, eff.group_ports, own, strict=False):
        if index not in runners or len(trainers) < 2 or taken(runners[index], [port]):
            continue  # a taken port is reported by _rollout_checks
        pid = _listen(runners[index], nodes[index], [port])
        try:
            results = parallel(lambda i, h=host, p=port: _unreachable(runners[i], [(h, p)]), trainers[1:])
        finally:
            runners[index].run(f"kill {pid} 2>/dev/null", timeout=10)
        out += [finding("PREFLIGHT-SYNC-PORT", "warning", "rollout.vllm_server_group_port",
                        f"{nodes[i].host} cannot reach the weight-sync group port {host}:{port} of rollout node "
                        f"{nodes[index].host}: weights would not reach vLLM if this node became trainer rank 0.",
                        f"Open port {port} from every trainer node to {host} (firewall, security group).")
                for i, down in results if not isinstance(down, Exception) and down]
    return out


def port_checks(eff: Resolved, runners: dict[int, Runner]) -> list[Finding]:
    trainers = [i for i, _ in eff.spec.numbered("trainer") if i in runners]
    if not trainers:
        return []
    out = _master_checks(eff, runners, trainers)
    if eff.server:
        out += _rollout_checks(eff, runners, trainers[0]) + _sync_port_checks(eff, runners, trainers)
    return out
